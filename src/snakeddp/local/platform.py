"""The local platform's contract: one node (this machine), the GPUs it shows its processes (counted
without torch or CUDA, CUDA_VISIBLE_DEVICES applied: snakeddp.util.gpus) and that the installed torch runs
on, a pool of them that its train jobs take from (snakeddp.local.gpupool), and a core for every thread a
run starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from snakeddp import platforms
from snakeddp.config import site
from snakeddp.config.parts import Launch
from snakeddp.contract import Invocation, Platform, PreflightError, Runs, note_instead
from snakeddp.environment.cuda import driver_hint, install_hint
from snakeddp.errors import print_line
from snakeddp.local import PLATFORM, gpupool
from snakeddp.util import cudabuild, gpus


def check_nodes(run_id: str, launch: Launch) -> None:
    if launch.nodes != 1:
        raise PreflightError(
            f"run {run_id}: launch.nodes={launch.nodes}, but the local profile runs on this machine only. "
            "HINT: set launch.nodes: 1, or run with "
            + " or ".join(f"--profile profiles/{name}" for name in platforms.multi_node())
            + "."
        )


def build_hint(why: site.NoGpus) -> str:
    """What would make the installed build fit: another build of torch, or for the driver what a rank offers."""
    if why.driver:
        return driver_hint(why.driver, cudabuild.installed_cuda() or "", list(why.models))
    return install_hint(why.builds or [])


def check_gpus(run_id: str, launch: Launch, env: Mapping[str, str] = os.environ) -> None:
    """A run that asks for GPUs, against the GPUs this machine shows its processes and the installed torch's
    build: more ranks than GPUs would die in Lightning's device check, a driver older than the build in
    CUDA's first call, a GPU the build has no kernels for in its first kernel."""
    if launch.accelerator != "gpu":
        return
    why = site.why_not_gpus(launch.devices, env)
    if why is None:
        return
    if why.builds is not None:
        raise PreflightError(f"run {run_id}: launch.accelerator: gpu, and {why.reason}. HINT: {build_hint(why)}.")
    seen = gpus.driver()
    shown, devices = len(gpus.apply_visible(seen, env)), launch.devices
    if shown:
        hint = f"set launch.devices: {shown} or fewer (sweep only what fits)"
    elif seen.failure():
        hint = gpus.remedy(seen)
    elif seen.enumerable():
        hint = f"leave {gpus.VISIBLE} unset"
    else:
        hint = "run it where there are GPUs (a cluster's profile)"
    raise PreflightError(
        f"run {run_id}: launch.accelerator: gpu asks for {devices} GPU{'s' if devices > 1 else ''} (launch.devices), "
        f"and {why.reason}. HINT: {hint}, or set launch.accelerator: auto to train what does not fit on the CPU."
    )


def check_bf16(run_id: str, launch: Launch, precision: str, env: Mapping[str, str] = os.environ) -> None:
    """bf16 on GPUs without native bfloat16 (compute capability under 8.0: V100, T4), where every GPU the run
    could be given is such: each rank would stop at start-up (snakeddp.training.trainer.check_precision)."""
    if not precision.startswith("bf16") or site.local_accelerator(launch, env) != "gpu":
        return
    shown = [gpu for gpu in gpus.visible(env) if gpu.capability]
    if not shown or any(gpu.capability >= (8, 0) for gpu in shown):
        return
    named = ", ".join(sorted({f"{gpu.model} ({gpu.capability[0]}.{gpu.capability[1]})" for gpu in shown}))
    raise PreflightError(
        f"run {run_id}: trainer.precision={precision}, and this machine's GPUs have no native bfloat16, which needs "
        f"compute capability 8.0 or newer: {named}. HINT: set trainer.precision: 16-mixed (or 32-true) for these "
        "GPUs, or run on A100/H100-class ones."
    )


def note_accelerators(launches: Mapping[str, Launch], env: Mapping[str, str] = os.environ) -> None:
    """A line for each run that auto trains on the CPU although this machine has GPUs (fewer than its ranks:
    a 2-rank run on a one-GPU workstation; a driver or GPU the installed torch cannot run), so the choice is
    seen before the run, not in its record."""
    seen = gpus.driver()
    if not seen.enumerable() and not seen.failure():
        return
    for run_id, launch in launches.items():
        why = site.why_not_gpus(launch.devices, env) if launch.accelerator == "auto" else None
        if why is None or not (gpus.apply_visible(seen, env) or seen.failure()):
            continue
        ranks = f"{launch.devices} rank{'s' if launch.devices > 1 else ''}"
        hint = f" HINT: {build_hint(why)}." if why.builds is not None else ""
        # NVML failed: what to do of it, or say cpu (which trains as now, without the note).
        hint = f" HINT: {gpus.remedy(seen)}, or set launch.accelerator: cpu." if seen.failure() else hint
        instead = "launch.accelerator: gpu would refuse it instead"
        print_line(
            f"snakeddp: run {run_id}: {ranks}, and {why.reason}: launch.accelerator auto trains it on the CPU "
            f"({instead}).{hint}"
        )


def check_cores(launches: Mapping[str, Launch], cores: int) -> None:
    """Each run's processes against the cores Snakemake may use. Checked when jobs are about to run,
    not while the workflow is read: Snakemake reads it with 1 core for a dry run or --list-rules and
    with none for --report, --summary or --unlock, and none of those runs a job."""
    for run_id, launch in launches.items():
        threads = launch.devices * launch.threads_per_process
        if threads > cores:
            raise PreflightError(
                f"run {run_id}: needs {threads} cores (launch.devices={launch.devices} x "
                f"launch.threads_per_process={launch.threads_per_process}), but snakemake may use {cores}: its "
                f"processes would share cores and its timings would mean nothing. HINT: run with --cores {threads} "
                "(or more), or lower launch.devices or launch.threads_per_process."
            )


def launches_of(invocation: Invocation[LocalState], runs: Runs) -> dict[str, Launch]:
    """The launch parts of ``runs``, as the plan built them."""
    return {run_id: invocation.launches[run_id] for run_id in runs}


@dataclass
class LocalState:
    gpus: int = 0  # the size of the pool train jobs take GPUs from (gpupool), once resources knew it


class Local(Platform[LocalState]):
    row = platforms.row(PLATFORM)

    def new_state(self) -> LocalState:
        return LocalState()

    def check_run(self, invocation: Invocation[LocalState], run_id: str, launch: Launch) -> None:
        check_nodes(run_id, launch)
        check_gpus(run_id, launch)

    def check(self, invocation: Invocation[LocalState]) -> None:
        for run_id, launch in invocation.launches.items():
            check_bf16(run_id, launch, invocation.trainers[run_id].precision)

    def note(self, invocation: Invocation[LocalState], to_train: Runs, cores: int | None) -> None:
        # Whatever cores a dry run was given (Snakemake gives it 1 unless told), for the runs not trained yet.
        if cores is not None:
            note_instead(lambda: check_cores(launches_of(invocation, to_train), cores))
        note_accelerators(launches_of(invocation, to_train))

    def resources(
        self,
        invocation: Invocation[LocalState],
        launch_of: Callable[[Any], Launch],
        accelerator_of: Callable[[Any], str],
    ) -> dict[str, Callable[[Any], int]]:
        # The pool's size: the GPUs a process here sees, unless the user's --resources gpu=N says otherwise.
        size = gpupool.slots(invocation.resources.resources, os.environ)
        if gpupool.RESOURCE not in invocation.resources.resources:
            invocation.provide(gpupool.RESOURCE, size)
        invocation.state.gpus = size
        return {
            gpupool.RESOURCE: lambda wildcards: (
                launch_of(wildcards).devices if accelerator_of(wildcards) == "gpu" else 0
            )
        }

    def before_jobs(self, invocation: Invocation[LocalState], to_train: Runs, training: Runs, cores: int) -> None:
        check_cores(invocation.launches, cores)
        note_accelerators(launches_of(invocation, to_train))
        gpupool.prepare(invocation.state.gpus)

    def exports(self, config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
        return {gpupool.POOL: str(gpupool.FOLDER.resolve())}

    def devices_for(self, devices: int, accelerator: str, env: Mapping[str, str]) -> dict[str, str]:
        # A CPU run's ranks see no GPU: nothing in them initialises CUDA (under a driver older than torch's
        # build, anything that did would raise) or takes memory on a GPU another run trains on.
        return gpupool.take(devices, env) if accelerator == "gpu" else {gpus.VISIBLE: ""}

    def where_tried(self, env: Mapping[str, str]) -> dict[str, Any]:
        return gpupool.waited(env)  # the platform's queue: the machine's GPUs a GPU run waited for


CONTRACT = Local()
