"""The local platform's contract: one node (this machine), the GPUs it shows its processes (counted
without torch, CUDA_VISIBLE_DEVICES applied: snakeddp.util.gpus), and a core for every thread a run starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from snakeddp import platforms
from snakeddp.config.parts import Launch
from snakeddp.errors import print_line
from snakeddp.local import PLATFORM
from snakeddp.platforms.contract import Invocation, Platform, PreflightError, Runs, note_instead
from snakeddp.util import gpus


def check_nodes(run_id: str, launch: Launch) -> None:
    if launch.nodes != 1:
        raise PreflightError(
            f"run {run_id}: launch.nodes={launch.nodes}, but the local profile runs on this machine only. "
            "HINT: set launch.nodes: 1, or run with --profile profiles/slurm (or profiles/azureml)."
        )


def check_gpus(run_id: str, launch: Launch, env: Mapping[str, str] = os.environ) -> None:
    """A run that asks for GPUs, against the GPUs this machine shows its processes: more ranks than GPUs
    would die in Lightning's device check."""
    if launch.accelerator != "gpu":
        return
    shown, devices = len(gpus.visible(env)), launch.devices
    if shown >= devices:
        return
    if shown:
        hint = f"set launch.devices: {shown} or fewer (sweep only what fits)"
    elif gpus.installed():
        hint = f"leave {gpus.VISIBLE} unset"
    else:
        hint = "run it where there are GPUs (a cluster's profile)"
    raise PreflightError(
        f"run {run_id}: launch.accelerator: gpu asks for {devices} GPU{'s' if devices > 1 else ''} (launch.devices), "
        f"and this machine shows {gpus.describe(env)}. HINT: {hint}, or set launch.accelerator: auto to train "
        "what does not fit on the CPU."
    )


def note_accelerators(runs: Runs, env: Mapping[str, str] = os.environ) -> None:
    """A line for each run that auto trains on the CPU although this machine has GPUs (fewer than its
    ranks: a 2-rank run on a one-GPU workstation), so the choice is seen before the run, not in its record."""
    shown = len(gpus.visible(env))
    for run_id, run in runs.items():
        launch = Launch.of(run["config"]["launch"])
        if launch.accelerator == "auto" and 0 < shown < launch.devices:
            print_line(
                f"snakeddp: run {run_id}: {launch.devices} ranks, and this machine shows {gpus.describe(env)}: "
                "launch.accelerator auto trains it on the CPU (launch.accelerator: gpu would refuse it instead)."
            )


def check_cores(runs: Runs, cores: int) -> None:
    """Each run's processes against the cores Snakemake may use. Checked when jobs are about to run,
    not while the workflow is read: Snakemake reads it with 1 core for a dry run or --list-rules and
    with none for --report, --summary or --unlock, and none of those runs a job."""
    for run_id, run in runs.items():
        launch = Launch.of(run["config"]["launch"])
        threads = launch.devices * launch.threads_per_process
        if threads > cores:
            raise PreflightError(
                f"run {run_id}: needs {threads} cores (launch.devices={launch.devices} x "
                f"launch.threads_per_process={launch.threads_per_process}), but snakemake may use {cores}: its "
                f"processes would share cores and its timings would mean nothing. HINT: run with --cores {threads} "
                "(or more), or lower launch.devices or launch.threads_per_process."
            )


class Local(Platform):
    row = platforms.row(PLATFORM)

    def check_run(self, run_id: str, launch: Launch) -> None:
        check_nodes(run_id, launch)
        check_gpus(run_id, launch)

    def note(self, invocation: Invocation, to_train: Runs, cores: int | None) -> None:
        # Whatever cores a dry run was given (Snakemake gives it 1 unless told), for the runs not trained yet.
        if cores is not None:
            note_instead(lambda: check_cores(to_train, cores))
        note_accelerators(to_train)

    def before_jobs(self, invocation: Invocation, to_train: Runs, training: Runs, cores: int) -> None:
        check_cores(invocation.runs, cores)
        note_accelerators(to_train)


CONTRACT = Local()
