"""A Snakemake working directory driven with --profile profiles/slurm against the local test cluster
(tests/slurm/cluster.py), shared by the Slurm test files."""

from __future__ import annotations

import copy
import re
import subprocess
import time
from pathlib import Path

import psutil

from snakeddp.run.layout import RunPaths
from snakeddp.slurm.polling import STATUS_VARIABLE
from tests.helpers import TINY, Workflow, subprocess_env, training_processes, without_generator_keys
from tests.slurm.cluster import Cluster

# Slurm status polling, shortened for tests: the plugin's first check comes after
# `init-seconds` and then every +10 s while nothing finishes; the jobs here take ~30-90 s.
FAST_POLLING = (
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--seconds-between-status-checks",
    "2",
    "--latency-wait",
    "5",
    # Keep every job's Slurm log so tests can read it (the plugin deletes successful ones).
    "--slurm-keep-successful-logs",
)
# And no longer than 3 s apart: the plugin's wait grows by 10 s a check while no job ends (snakeddp.slurm.polling),
# so a job that ended 40 s after the last one was seen at 68 s.
FAST_STATUS = {STATUS_VARIABLE: "3"}


class SlurmWorkflow(Workflow):
    """A Workflow driven with --profile profiles/slurm against the local cluster."""

    def __init__(self, directory: Path, cluster: Cluster) -> None:
        super().__init__(directory, profile="slurm")
        self.cluster = cluster

    def env(self) -> dict[str, str]:
        # UTC: sacct prints times in local time, the run's metrics in UTC.
        return subprocess_env(TZ="UTC", **FAST_STATUS, **self.cluster.env())

    def command(self, *args: str) -> list[str]:
        return super().command(*FAST_POLLING, *args)

    def run(self, *args: str, check: bool = True, timeout: float = 900, env: dict | None = None):
        return super().run(*args, check=check, timeout=timeout, env=env or self.env())

    def popen(self, *args: str) -> subprocess.Popen:
        """The workflow typed with ``args``, running in the background, its output piped."""
        return subprocess.Popen(
            self.command(*args), cwd=self.directory, env=self.env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def slurm(self, *argv: str) -> str:
        return subprocess.run(argv, env=self.env(), capture_output=True, text=True, check=True, timeout=60).stdout


def run_uuid(snakemake_output: str) -> str:
    """The plugin's id of one Snakemake invocation: the name of every job it submitted."""
    match = re.search(r"SLURM run ID: (\S+)", snakemake_output)
    assert match, "no 'SLURM run ID' in Snakemake's output"
    return match.group(1)


def config(**sections) -> dict:
    cfg = copy.deepcopy(TINY)
    for key, value in sections.items():
        if isinstance(value, dict) and key != "sweep":
            cfg.setdefault(key, {}).update(value)
        else:
            cfg[key] = value
    return without_generator_keys(cfg, sections)


def ranks_once_saved(snakemake: subprocess.Popen, run_dir: Path, within_s: float = 600) -> dict[int, psutil.Process]:
    """The run's training ranks by SLURM_PROCID, once it has saved an epoch (the workflow still running)."""
    deadline = time.monotonic() + within_s
    while not RunPaths(run_dir).last_checkpoint.is_file():
        assert snakemake.poll() is None and time.monotonic() < deadline, "training never saved an epoch"
        time.sleep(0.2)
    return {int(p.environ()["SLURM_PROCID"]): p for p in training_processes(run_dir)}
