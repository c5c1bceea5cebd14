"""The harness's Snakemake forked from a server that imported it once (tests/forked_snakemake.py) is the run a
cold `python -m snakemake` makes: the same plan, the same refusal and exit status, its CPU counted, a timeout
that kills it, and another checkout's package run cold."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests import forked_snakemake
from tests.checkout import hint_lines
from tests.gpu_standin import StandIn
from tests.helpers import TINY, Workflow, job_counts, left_running, subprocess_env, tiny_with


def both_ways(flow: Workflow, *args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """``snakemake ARGS`` forked, then cold (as tests.helpers.Workflow.run makes each)."""
    forked = forked_snakemake.run(flow.command(*args), flow.directory, subprocess_env(), timeout=300)
    assert forked is not None, "a run of this checkout's package in the workflows' venv is forked"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(forked_snakemake.COLD, "1")
        assert forked_snakemake.run(flow.command(*args), flow.directory, subprocess_env(), timeout=300) is None
        cold = flow.run(*args, check=False)
    return forked, cold


def test_a_forked_dry_run_plans_what_a_cold_one_plans_and_its_cpu_is_counted(tmp_path):
    flow = Workflow(tmp_path)
    flow.write_config(TINY)
    before = forked_snakemake.forked_cpu_s[0]
    forked, cold = both_ways(flow, "--dry-run", "--quiet=rules")
    assert forked_snakemake.forked_cpu_s[0] > before, "the forked run's CPU is the test's"
    assert (forked.returncode, cold.returncode) == (0, 0), forked.stdout + forked.stderr
    assert job_counts(forked.stdout + forked.stderr) == job_counts(cold.stdout + cold.stderr)
    assert job_counts(forked.stdout + forked.stderr)["train"] == 1


def test_a_refused_config_is_refused_forked_as_cold_with_the_same_hint_and_status(tmp_path):
    flow = Workflow(tmp_path)
    flow.write_config(tiny_with({"trainer": {"max_epochs": 0}}))
    forked, cold = both_ways(flow, "--dry-run")
    assert forked.returncode == cold.returncode != 0
    assert hint_lines(forked) == hint_lines(cold) != [], forked.stdout + forked.stderr


def test_a_forked_run_past_its_timeout_is_killed_with_what_it_started(tmp_path):
    """Five thousand epochs without early stopping would train for minutes: killed at its timeout, nothing of it is
    left (a kill forgotten leaves the run training here)."""
    flow = Workflow(tmp_path)
    flow.write_config(tiny_with({"trainer": {"max_epochs": 5000, "early_stopping": {"enabled": False}}}))
    with pytest.raises(subprocess.TimeoutExpired):
        forked_snakemake.run(flow.command(), flow.directory, subprocess_env(), timeout=3)
    assert left_running(flow.directory, within=10) == [], "the timed-out run was left running"


def test_another_checkouts_package_runs_cold(tmp_path):
    """A run whose import path puts another version's snakeddp first (tests/e2e/test_upgrade.py) is not forked
    from this checkout's code."""
    other = tmp_path / "other" / "src" / "snakeddp"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    flow = Workflow(tmp_path / "flow")
    flow.directory.mkdir()
    flow.write_config(TINY)
    env = subprocess_env(PYTHONPATH=str(other.parent))
    assert forked_snakemake.run(flow.command("--dry-run"), flow.directory, env, timeout=300) is None


def test_no_process_outlives_a_forked_run_with_its_environment(tmp_path):
    """The server is started with the interpreter's variables only: one started with a test's whole environment
    would outlive the run looking like it (tests/slurm/cluster.py stops every process whose environment names
    its cluster). PYTHONWARNINGS: a server of its own, started by this run."""
    flow = Workflow(tmp_path)
    flow.write_config(TINY)
    marker = f"SNAKEDDP_TESTS_MARKER={uuid.uuid4()}"
    env = subprocess_env(PYTHONWARNINGS="default", **dict([marker.split("=")]))
    done = forked_snakemake.run(flow.command("--dry-run"), flow.directory, env, timeout=300)
    assert done is not None and done.returncode == 0, done
    assert started_with(marker.encode()) == []


def started_with(variable: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and variable in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_run_in_a_stand_in_gpu_machine_is_forked_into_its_namespace_and_plans_as_a_cold_one(tmp_path):
    """A wrapped run (tests.gpu_standin) forked enters the stand-in's mounts before Snakemake's main: the plan
    sees its GPU as the cold wrapped command does (here one GPU, so the two-rank run is planned on the CPU)."""
    standin = StandIn(tmp_path / "gpus", count=1)
    flow = Workflow(tmp_path / "flow")
    flow.directory.mkdir()
    flow.write_config(
        {**TINY, "launch": {**TINY["launch"], "accelerator": "auto"}, "sweep": {"launch.devices": [1, 2]}}
    )
    env = standin.env(subprocess_env(), visible=None)
    before = forked_snakemake.forked_cpu_s[0]
    forked = flow.run("-n", env=env, wrap=standin.command)
    assert forked_snakemake.forked_cpu_s[0] > before, "forked, not started cold"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(forked_snakemake.COLD, "1")
        cold = flow.run("-n", env=env, wrap=standin.command)
    said = [[line for line in done.stderr.splitlines() if line.startswith("snakeddp:")] for done in (forked, cold)]
    assert said[0] == said[1], said
    assert any("this machine shows 1 GPU (NVIDIA A100-SXM4-40GB)" in line for line in said[0]), said[0]
