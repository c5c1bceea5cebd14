"""snakeddp.remote.attempt: a remote job's run directory coming back into results/runs/<run>/."""

import json

from snakeddp.remote.attempt import collect, stage_resume
from snakeddp.remote.entry import seed
from snakeddp.training.gather import folder


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_job_files_replace_the_local_attempt_and_provenance_comes_last(tmp_path):
    run_dir, job = tmp_path / "run", tmp_path / "download" / "run_dir"
    write(run_dir / "run.yaml", "config")
    write(run_dir / "checkpoints" / "last.ckpt", "old")
    write(run_dir / "checkpoints" / "epoch000.ckpt", "pruned by the job")
    write(run_dir / "metrics.csv", "epoch\n0\n")
    write(job / "checkpoints" / "last.ckpt", "new")
    write(job / "checkpoints" / "epoch002.ckpt", "best")
    write(job / "metrics.csv", "epoch\n0\n1\n2\n")
    write(job / "run-state.json", "{}")
    write(job / "provenance.json", "{}")
    write(job / ".snakeddp-resume-seeded", "job-1")
    assert collect(job, run_dir)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["epoch002.ckpt", "last.ckpt"]
    assert (run_dir / "checkpoints" / "last.ckpt").read_text() == "new"
    assert (run_dir / "metrics.csv").read_text() == "epoch\n0\n1\n2\n"
    assert (run_dir / "provenance.json").is_file() and (run_dir / "run.yaml").read_text() == "config"
    assert not (run_dir / ".snakeddp-resume-seeded").exists(), "job bookkeeping stays behind"
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".replaced")]


def test_a_job_that_wrote_nothing_leaves_the_run_directory_alone(tmp_path):
    run_dir, job = tmp_path / "run", tmp_path / "download" / "run_dir"
    write(run_dir / "checkpoints" / "last.ckpt", "from an earlier attempt")
    write(job / "metrics.csv", "epoch\n")
    assert not collect(job, run_dir)
    assert (run_dir / "checkpoints" / "last.ckpt").read_text() == "from an earlier attempt"
    assert not (run_dir / "metrics.csv").exists()


def test_a_hangs_evidence_goes_to_the_job_with_the_attempt_it_resumes_and_comes_back_beside_the_jobs_own(tmp_path):
    """The attempt staged for a job holds its hung tries' evidence (hang/try-<n>/); the job's ranks, seeded with it,
    write their hang's next to it (training.gather.folder: a number no folder holds), and all of it comes back."""
    run_dir, resume, job = tmp_path / "run", tmp_path / "resume", tmp_path / "download" / "run_dir"
    write(run_dir / "checkpoints" / "last.ckpt", "saved before the hang")
    write(run_dir / "run-state.json", json.dumps({"resume_key": "k"}))
    write(run_dir / "hang" / "try-1" / "stacks.txt", "the first hang's stacks")
    assert stage_resume(run_dir, resume, "k") == resume
    seed(resume, job, "job-2")
    assert (job / "hang" / "try-1" / "stacks.txt").read_text() == "the first hang's stacks"
    here = folder(job)
    assert here == job / "hang" / "try-2"
    write(here / "stacks.txt", "the job's own hang")
    assert collect(job, run_dir)
    assert {p.parent.name: p.read_text() for p in (run_dir / "hang").glob("*/stacks.txt")} == {
        "try-1": "the first hang's stacks",
        "try-2": "the job's own hang",
    }
