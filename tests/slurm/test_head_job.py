"""Snakemake's own process inside an sbatch job (a head job, `sbatch --wrap "snakemake --profile
local"`): the progress lines of the jobs it runs on its node reach the job's output file whole,
once and in order, whether Slurm opens that file truncated (the default) or for appending. (Slurm
22.05's slurmstepd hands a batch job a pipe and writes the file itself, so this holds however the
file was opened; the check is that it holds.) tests/terminal_host.py stands in for Snakemake."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import subprocess_env
from tests.slurm.cluster import Cluster
from tests.terminal_host import check_every_line_once_in_order, host_command

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

# sacct's states of a job not yet ended ("" before slurmdbd has it at all).
UNFINISHED = ("", "PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED")


@pytest.mark.parametrize("open_mode", ["truncate", "append"])
def test_a_head_job_keeps_every_line_in_its_output_file(slurm_cluster: Cluster, tmp_path: Path, open_mode: str):
    out = tmp_path / "head.log"
    env = subprocess_env(**slurm_cluster.env())
    submit = ["sbatch", "--parsable", f"--open-mode={open_mode}", f"--output={out}", f"--wrap={host_command()}"]
    job = subprocess.run(submit, cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.strip()
    # sacct, not squeue: slurmdbd records the end a moment after the job leaves the queue (CI once
    # read RUNNING from sacct with squeue already empty).
    deadline = time.monotonic() + 120
    accounted = ["sacct", "--noheader", "--parsable2", "--allocations", "--format=State", "--jobs", job]
    while (state := subprocess.run(accounted, env=env, capture_output=True, text=True).stdout.strip()) in UNFINISHED:
        assert time.monotonic() < deadline, f"the head job did not finish: {state or 'not accounted'}"
        time.sleep(0.5)
    assert state == "COMPLETED", out.read_text() if out.exists() else state
    check_every_line_once_in_order(out.read_text())
