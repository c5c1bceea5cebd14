"""Ingestion by a Slurm array job (snakeddp.slurm.ingest, snakeddp.data.spread) on the real Slurm test cluster:
a Delta table written by delta-rs and a Parquet folder give the partitions, entries (BLAKE3) and validation set
of a local ingestion of the same table, byte for byte, each window read by an array task of its own; a bad
value read on a node stops the step in the local ingestion's one line; a step stopped by SIGTERM cancels its
array job and leaves nothing of it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snakeddp.data.table import ingest
from snakeddp.slurm import ingest as slurm_ingest
from tests import tables
from tests.helpers import Workflow, subprocess_env
from tests.slurm.cluster import Cluster
from tests.slurm.workflow import SlurmWorkflow, config
from tests.spread_tables import bad_value_said_as_locally, delta_table, parquet_folder, same_files, the_rows

pytestmark = [pytest.mark.slurm]


def sacct_lines(job: str, env: dict[str, str]) -> list[str]:
    """Each of the job's steps: state, exit code, reason (what a failed assertion shows)."""
    listed = subprocess.run(["sacct", "-n", "-P", "-j", job, "--format=JobID,State,ExitCode,Reason"], env=env,
                            capture_output=True, text=True)  # fmt: skip
    return listed.stdout.splitlines()


def job_states(job: str, env: dict[str, str], within_s: float = 60) -> list[str]:
    """The job's states (an array's, one a task) once none is pending or running, or at ``within_s``."""
    deadline, states = time.monotonic() + within_s, []
    while time.monotonic() < deadline:
        listed = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "--format=State"], env=env, capture_output=True)
        states = listed.stdout.decode().split()
        if states and not {"PENDING", "RUNNING", "REQUEUED"} & set(states):
            break
        time.sleep(0.5)
    return states


def slurm_env(cluster: Cluster) -> dict[str, str]:
    return {**subprocess_env(**cluster.env()), "SNAKEDDP_PLATFORM": "slurm"}


def counted(folder: Path, env: dict[str, str], *commands: str) -> tuple[dict[str, str], Path]:
    """``env`` where each of ``commands`` (the real one, on env's PATH) is written to the returned file, a line a
    call, before it runs."""
    folder.mkdir()
    calls = folder / "calls"
    for command in commands:
        real = shutil.which(command, path=env["PATH"])
        assert real, command
        wrapper = folder / command
        wrapper.write_text(
            f'#!/bin/sh\necho "{command} $*" >> {shlex.quote(str(calls))}\nexec {shlex.quote(real)} "$@"\n'
        )
        wrapper.chmod(0o755)
    calls.touch()
    return {**env, "PATH": f"{folder}:{env['PATH']}"}, calls


@pytest.mark.parametrize("kind", ["delta", "parquet"])
def test_an_array_job_ingests_the_partitions_a_local_ingestion_writes(slurm_cluster, tmp_path, monkeypatch, kind):
    write = delta_table if kind == "delta" else parquet_folder
    table = write(tmp_path / "table", the_rows())
    params = tables.params(table, partitions=3)
    ingest(params, tmp_path / "local")
    monkeypatch.chdir(tmp_path)  # the array's tasks run here (--chdir), as a data job's in the workflow's directory
    summary = slurm_ingest.ingest(params, tmp_path / "slurm", slurm_env(slurm_cluster))

    assert len(same_files(tmp_path / "local", tmp_path / "slurm")) == 2 * (3 + 1)
    assert summary["pieces"] == 2 and json.loads((tmp_path / "slurm" / "val.json").read_text())["blake3"]
    # Each window read by an array task: two processes, none of them this one.
    readers = {tuple(r) for r in summary["readers"]}
    assert len(readers) == 2 and all(pid != os.getpid() for _, pid in readers), readers
    assert not (tmp_path / "slurm" / ".pieces").exists()


def test_a_bad_value_read_by_an_array_task_is_the_local_ingestions_one_line(slurm_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad_value_said_as_locally(tmp_path, lambda params, out: slurm_ingest.ingest(params, out, slurm_env(slurm_cluster)))


# The ingest step as data_table runs it on the slurm platform, in a process of its own (the test stops it).
STEP = """
import json, sys
from snakeddp.slurm import ingest
ingest.ingest(json.loads(sys.argv[1]), sys.argv[2])
"""


def test_a_step_stopped_by_sigterm_cancels_its_array_job_and_leaves_nothing(slurm_cluster, tmp_path):
    """SIGTERM, as Slurm sends the step's own job when it is cancelled or at its time limit, once the array job is
    submitted: the step cancels it (it read on before, into the folder Snakemake removes or into the rerun's)
    and removes the pieces' folder."""
    table = parquet_folder(tmp_path / "table", the_rows())
    out = tmp_path / "results" / "data" / "t"
    command = [sys.executable, "-c", STEP, json.dumps(tables.params(table, partitions=3)), str(out)]
    env = slurm_env(slurm_cluster)
    step = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    said = [step.stderr.readline()]
    while said[-1] and "ingest: Slurm array job" not in said[-1]:
        said.append(step.stderr.readline())
    job = said[-1].split("Slurm array job ")[-1].split(",")[0]
    assert job.isdigit(), said
    step.send_signal(signal.SIGTERM)
    assert step.wait(timeout=60) == 128 + signal.SIGTERM, step.stderr.read()
    job_states(job, env)
    # The job, or its batch step where scancel met a task still being launched (the job then FAILED, 0:53: Slurm's
    # SIG_FAILURE), is CANCELLED; no task COMPLETED.
    lines = sacct_lines(job, env)
    states = [line.split("|")[1].split()[0] for line in lines]
    assert "CANCELLED" in states and "COMPLETED" not in states, lines
    assert os.listdir(out) == ["train"] and not os.listdir(out / "train")


def test_scancel_that_fails_is_asked_again_then_its_hint_cancels_and_an_ended_job_is_asked_once(
    slurm_cluster, tmp_path, capfd
):
    """The cancel on the way out: a scancel that does not reach the controller (here its port is closed) is asked
    again, then said in one line whose HINT, typed, cancels the job; a job that has ended is asked once, in silence."""
    env = slurm_env(slurm_cluster)
    submit = ["sbatch", "--parsable", "--output=/dev/null", "--wrap=sleep 300"]
    running = subprocess.run(submit, cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.strip()
    unreachable = tmp_path / "slurm.conf"
    port = slurm_cluster.ports["slurmctld"]
    unreachable.write_text(slurm_cluster.conf.read_text().replace(f"SlurmctldPort={port}", f"SlurmctldPort={port + 7}"))
    slurm_ingest.cancel(running, {**env, "SLURM_CONF": str(unreachable)}, tries=2)
    (line,) = [line for line in capfd.readouterr().err.splitlines() if "HINT:" in line]
    assert f"scancel {running} failed 2 times" in line, line
    typed = subprocess.run(["bash", "-c", line.split("`")[1]], cwd=tmp_path, env=env, capture_output=True, check=False)
    assert typed.returncode == 0, typed
    assert "CANCELLED" in job_states(running, env), sacct_lines(running, env)
    done = subprocess.run(
        [*submit[:-1], "--wait", "--wrap=true"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    # Counted, not timed (under 1 s, which two Slurm commands and a busy controller on a loaded 2-core machine can
    # take): scancel once, and the look for the array's tasks left, none, once.
    ended = done.stdout.strip()
    watched, calls = counted(tmp_path / "counted", env, "scancel", "squeue")
    slurm_ingest.cancel(ended, watched, tries=2)
    assert not capfd.readouterr().err
    said = calls.read_text().splitlines()
    assert said.count(f"scancel {ended}") == len([c for c in said if c.startswith("scancel")]) == 1, said
    assert len([c for c in said if c.startswith("squeue")]) <= 1, said


def test_scancel_that_a_silent_controller_holds_is_given_up_on_within_its_bound(
    slurm_cluster, tmp_path, capfd, monkeypatch
):
    """A controller that takes the connection and never answers (a hung slurmctld): each scancel is abandoned
    after SCANCEL_S, not after Slurm's MessageTimeout (here 60 s), and the line's HINT, typed, cancels the job."""
    env = slurm_env(slurm_cluster)
    submit = ["sbatch", "--parsable", "--output=/dev/null", "--wrap=sleep 300"]
    running = subprocess.run(submit, cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.strip()
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never accepts: the kernel queues the connection
        port = slurm_cluster.ports["slurmctld"]
        silent_port = silent.getsockname()[1]
        hung = tmp_path / "slurm.conf"
        conf = slurm_cluster.conf.read_text().replace(f"SlurmctldPort={port}", f"SlurmctldPort={silent_port}")
        hung.write_text(f"{conf}\nMessageTimeout=60\n")
        monkeypatch.setattr(slurm_ingest, "SCANCEL_S", 2.0)
        started = time.monotonic()
        slurm_ingest.cancel(running, {**env, "SLURM_CONF": str(hung)}, tries=2)
        assert time.monotonic() - started < 15, "two tries of 2 s, a second apart"
    (line,) = [line for line in capfd.readouterr().err.splitlines() if "HINT:" in line]
    assert f"scancel {running} failed 2 times (no answer within 2 s)" in line, line
    typed = subprocess.run(["bash", "-c", line.split("`")[1]], cwd=tmp_path, env=env, capture_output=True, check=False)
    assert typed.returncode == 0, typed
    assert "CANCELLED" in job_states(running, env), sacct_lines(running, env)


@pytest.mark.e2e
def test_snakemake_profile_slurm_ingests_by_an_array_job(slurm_cluster, tmp_path):
    """The command the user types: `snakemake --profile slurm` up to the manifests, whose ingest job (itself a
    Slurm job) submits the array; the partitions and manifest are those of `--profile local`."""
    table = parquet_folder(tmp_path / "table", the_rows())
    section = {"path": str(table), "features": tables.FEATURES, "label": "y"}
    data = {"source": "table", "num_train_files": 3, "num_classes": 1, "table": section}
    for profile, flow in (("slurm", SlurmWorkflow), ("local", None)):
        (tmp_path / profile).mkdir()
        workflow = flow(tmp_path / profile, slurm_cluster) if flow else Workflow(tmp_path / profile, profile=profile)
        workflow.write_config(config(data=data))
        workflow.run("--until", "data_manifest", env=subprocess_env(**slurm_cluster.env()))
    [log] = (tmp_path / "slurm" / "logs" / "data").glob("*/ingest.log")
    assert "600,000 rows in 2 pieces, read by a Slurm array job" in log.read_text(), log.read_text()
    names = same_files(tmp_path / "local" / "results" / "data", tmp_path / "slurm" / "results" / "data")
    assert sum(name.endswith(".safetensors") for name in names) == 4 and any("manifest-" in n for n in names)
