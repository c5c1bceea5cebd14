"""snakeddp.databricks.results: what a finished Databricks run leaves on the volume is copied back only when
it can be trusted, through the train job's own command (tests/databricks/submission.py) against the local
stub, whose job writes a tampered run folder: a listing that names something outside the run's folder is
refused before anything is copied or deleted, and a checkpoint whose sha256 is not its provenance's is
refused with no record left that could pass for a finished run. Each is one line with a HINT, and doing
what the HINT says (the stray entry removed; the same command again) brings the run back complete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from snakeddp.run import attempt
from snakeddp.util.hashing import sha256_bytes
from tests.databricks.submission import STAGE, prepare
from tests.databricks_server import DatabricksStub

TOKEN = "dapi-3b9e41-results-stub-token"
WEIGHTS = b"snakeddp-weights-" * 64


def files_outside(directory: Path, run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in directory.rglob("*")
        if p.is_file() and not p.is_relative_to(run_dir)
    }


def finished_job(stub: DatabricksStub, run_id: str, weights: bytes = WEIGHTS, listed: dict | None = None):
    """The job cluster's part: a finished run's folder on the volume, its provenance recording WEIGHTS'
    sha256; ``weights``: the checkpoint's bytes as they are there; ``listed``: entries its listing shows too."""

    def run(body: dict[str, Any], root: Path) -> tuple[str, str]:
        folder = stub.local(f"{STAGE}/results/runs/{run_id}")
        (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
        (folder / "checkpoints" / "last.ckpt").write_bytes(weights)
        (folder / "metrics.csv").write_text("epoch,train_loss\n0,0.5\n")
        (folder / "run-state.json").write_text("{}")
        record = {"path": "checkpoints/last.ckpt", "bytes": len(WEIGHTS), "sha256": sha256_bytes(WEIGHTS)}
        # provenance.json and the attempt's own copy of it, as rank 0 leaves them.
        for name in ("provenance.json", "finished.json"):
            (folder / name).write_text(json.dumps({"training": {"last_checkpoint": record}}))
        stub.listed.update(listed or {})
        return "SUCCESS", ""

    return run


def one_hint(code: int, said: str) -> str:
    lines = [line for line in said.splitlines() if "HINT:" in line]
    assert code == 1 and len(lines) == 1, said
    return lines[0]


RUN = f"{STAGE}/results/runs/base"
ESCAPES = {
    "dot-dot": (RUN, {"path": f"{RUN}/../secret.txt", "name": "secret.txt", "is_directory": False, "file_size": 6}),
    "absolute": (RUN, {"path": "/Volumes/main/ml/other/secret.txt", "name": "secret.txt", "is_directory": False,
                       "file_size": 6}),
    "double-slash": (RUN, {"path": f"{RUN}//secret.txt", "name": "secret.txt", "is_directory": False,
                           "file_size": 6}),
    "sibling-prefix": (RUN, {"path": f"{RUN}-x/secret.txt", "name": "secret.txt", "is_directory": False,
                             "file_size": 6}),
    "directory-up": (f"{RUN}/checkpoints", {"path": f"{RUN}/checkpoints/../..", "name": "..", "is_directory": True}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ESCAPES))
def test_a_listing_naming_a_path_outside_the_run_is_refused_and_nothing_outside_is_written_or_deleted(
    case, stub, tmp_path, monkeypatch, capsys
):
    folder, entry = ESCAPES[case]
    # What the stray entry names exists on the volume: it must be neither copied back nor deleted.
    for path in (f"{STAGE}/results/runs/secret.txt", "/Volumes/main/ml/other/secret.txt", f"{RUN}-x/secret.txt"):
        stub.local(path).parent.mkdir(parents=True, exist_ok=True)
        stub.local(path).write_text("secret")
    flow = prepare(tmp_path / "flow", stub, TOKEN, monkeypatch, {})
    before = files_outside(flow.directory, flow.run_dir)
    stub.runner = finished_job(stub, flow.run_id, listed={folder: [entry]})
    line = one_hint(*flow.submit(capsys))
    assert f"the listing of {folder} names {entry['path']!r}, which is not inside it" in line, line
    assert f"HINT: remove {entry['path']!r} from {folder} on Databricks" in line and TOKEN not in line
    assert files_outside(flow.directory, flow.run_dir) == before, "nothing written outside results/runs/base/"
    assert not (flow.run_dir / "provenance.json").exists() and not attempt.finished(flow.run_dir)
    assert not list((flow.run_dir / "databricks" / "download").rglob("provenance.json"))
    # Submitting again with the stray entry still listed: refused while clearing the run's folder, before any job.
    jobs = len(stub.requests("POST", "/api/2.2/jobs/runs/submit"))
    assert "which is not inside it" in one_hint(*flow.submit(capsys))
    assert len(stub.requests("POST", "/api/2.2/jobs/runs/submit")) == jobs
    assert not stub.requests("DELETE", "/api/2.0/fs/files/Volumes/main/ml/other")
    assert all(stub.local(p).read_text() == "secret" for p in (f"{STAGE}/results/runs/secret.txt",
               "/Volumes/main/ml/other/secret.txt", f"{RUN}-x/secret.txt"))  # fmt: skip
    # As the HINT says: the stray entry removed on Databricks, then the same command again.
    stub.listed.clear()
    stub.runner = finished_job(stub, flow.run_id)
    code, said = flow.submit(capsys)
    assert code == 0 and (flow.run_dir / "provenance.json").is_file(), said
    assert (flow.run_dir / "checkpoints" / "last.ckpt").read_bytes() == WEIGHTS


def test_a_checkpoint_unlike_its_provenance_is_refused_and_no_finished_record_is_left(
    stub, tmp_path, monkeypatch, capsys
):
    flow = prepare(tmp_path / "flow", stub, TOKEN, monkeypatch, {})
    tampered = b"X" * len(WEIGHTS)  # the size its provenance records: only the sha256 tells
    stub.runner = finished_job(stub, flow.run_id, weights=tampered)
    line = one_hint(*flow.submit(capsys))
    assert "checkpoints/last.ckpt came back different from what provenance.json records (size or sha256)" in line
    assert "HINT: rerun the same command: the run is submitted again, and nothing of this copy is kept." in line
    assert not attempt.finished(flow.run_dir) and not (flow.run_dir / "provenance.json").exists()
    assert not (flow.run_dir / "checkpoints" / "last.ckpt").exists(), "the refused copy's checkpoint stays out"
    assert not [p for p in flow.run_dir.rglob("*") if p.name in ("provenance.json", "finished.json")]
    # As the HINT says: the same command again (the job this time leaves what its provenance records).
    stub.runner = finished_job(stub, flow.run_id)
    code, said = flow.submit(capsys)
    assert code == 0 and attempt.finished(flow.run_dir), said
    assert (flow.run_dir / "checkpoints" / "last.ckpt").read_bytes() == WEIGHTS
