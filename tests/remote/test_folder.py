"""snakeddp.remote.folder: what a remote platform's train job keeps of one run, under the run's folder."""

from __future__ import annotations

from snakeddp.remote.folder import RECORD_FILE, Folder
from snakeddp.util.fsutil import read_json


def test_the_folder_is_the_platforms_under_the_run_and_names_its_parts(tmp_path):
    folder = Folder.of(tmp_path / "runs" / "base", "toy")
    assert folder.root == (tmp_path / "runs" / "base" / "toy").resolve()
    assert (folder.code, folder.resume, folder.download) == (
        folder.root / "code", folder.root / "resume", folder.root / "download"
    )  # fmt: skip


def test_a_record_adds_to_the_latest_submission_and_a_fresh_one_starts_it_over(tmp_path):
    folder = Folder(tmp_path / "toy")
    folder.root.mkdir()
    folder.record(fresh=True, job_id="1", status="Queued")
    folder.record(status="Completed", collected=True)
    kept = read_json(folder.root / RECORD_FILE)
    assert (kept["job_id"], kept["status"], kept["collected"]) == ("1", "Completed", True) and kept["updated_at"]
    folder.record(fresh=True, job_id="2")
    kept = read_json(folder.root / RECORD_FILE)
    assert kept["job_id"] == "2" and "status" not in kept and "collected" not in kept


def test_a_fresh_download_keeps_nothing_of_an_earlier_jobs_copy(tmp_path):
    folder = Folder(tmp_path / "toy")
    (folder.download / "checkpoints").mkdir(parents=True)
    (folder.download / "checkpoints" / "last.ckpt").write_text("an earlier job's")
    assert folder.fresh_download() == folder.download and not folder.download.exists()
