"""snakeddp.remote.entry: the one command every remote job runs (seed the run directory from the staged
attempt, then run the run's training), run as a Databricks task runs it: a file in the code snapshot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from snakeddp.remote.entry import seed, wait_for_seed
from snakeddp.remote.folder import ENTRY, Folder
from snakeddp.run.layout import RESUME_SEEDED as SEEDED
from tests.helpers import subprocess_env


def attempt(folder):
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (folder / "metrics.csv").write_text("epoch\n0\n")
    (folder / "run-state.json").write_text("{}")
    return folder


def test_rank_zero_seeds_the_attempt_and_the_others_wait_for_this_job_only(tmp_path):
    staged = attempt(tmp_path / "resume")
    (staged / "unrelated.txt").write_text("not part of an attempt")
    run_dir = tmp_path / "out"
    run_dir.mkdir()
    (run_dir / SEEDED).write_text("an-earlier-job")
    with pytest.raises(TimeoutError, match="rank 1 waited 0 s for rank 0"):
        wait_for_seed(run_dir, "job-2", rank=1, timeout_s=0.1)
    seed(staged, run_dir, "job-2")
    wait_for_seed(run_dir, "job-2", rank=1, timeout_s=0.1)
    assert (run_dir / "checkpoints" / "last.ckpt").read_bytes() == b"weights"
    assert sorted(p.name for p in run_dir.iterdir()) == [SEEDED, "checkpoints", "metrics.csv", "run-state.json"]


def test_run_as_a_file_from_the_snapshot_it_exports_moves_in_seeds_then_hands_over(tmp_path):
    """A task that names a file: the variables exported before the seeding (its token is the job id they
    name), the run directory relative to the work folder, then snakeddp.launch given the rest as typed."""
    code = Folder(tmp_path / "platform").snapshot()
    work = tmp_path / "stage"
    staged = attempt(work / "resume" / "base")
    argv = [sys.executable, str(code / ENTRY), "--variables", json.dumps({"AZUREML_RUN_ID": "job-9"})]
    argv += ["--workdir", str(work), "--resume-from", "resume/base", "launch", "--"]
    argv += ["--config", "runs/base/run.yaml", "--run-dir", "runs/base", "--help"]
    done = subprocess.run(argv, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage: python -m snakeddp.launch" in done.stdout, done.stderr
    run_dir = work / "runs" / "base"
    assert (run_dir / SEEDED).read_text() == "job-9"
    assert (run_dir / "checkpoints" / "last.ckpt").read_bytes() == (staged / "checkpoints" / "last.ckpt").read_bytes()
