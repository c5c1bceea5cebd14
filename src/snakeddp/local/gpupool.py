"""This machine's GPUs as a pool its train jobs take from, so that runs never share a GPU: neither two runs of
one workflow, nor runs of two checkouts or two users, nor a run and another program's work.

Snakemake counts them within a workflow: the workflow declares a global ``gpu`` resource the size of the GPUs a
process sees (``snakemake --resources gpu=N`` set by the user wins: more slots than GPUs is the user asking runs
to share them), and a GPU run's train job takes ``launch.devices`` of it. Which GPUs a job gets is decided here,
in the job, before its ranks start. Each GPU has a lock of the whole machine's (snakeddp.local.gpulocks); a job
takes the locks of GPUs no other snakeddp run holds, then asks NVML whether another program computes on them
(snakeddp.util.gpuuse) and lets go of those, saying which and why. Where fewer GPUs than its ranks are free it
waits for runs that hold them to end (saying so once), and where other programs' work leaves too few it is
refused in one line. Its ranks see the GPUs it holds only (CUDA_VISIBLE_DEVICES, by UUID, so a user's own
CUDA_VISIBLE_DEVICES is honoured and never renumbered).

Runs that share (``--resources gpu=N`` above the GPUs) take slots held with ``flock`` under the workflow's
folder, slot k on GPU k modulo the GPUs, and each GPU's machine lock shared: they never share with a run that
holds a GPU of its own, and know other programs' work on it is what they asked for.
"""

from __future__ import annotations

import fcntl
import functools
import os
import time
from collections.abc import Mapping
from pathlib import Path

from snakeddp.errors import LaunchError
from snakeddp.local import gpulocks
from snakeddp.util import gpus, gpuuse
from snakeddp.util.fsutil import atomic_write_text
from snakeddp.util.terminal import say

#: Snakemake's resource: what a GPU run's train job takes, and the workflow's limit of it.
RESOURCE = "gpu"
#: The pool's folder, for the train jobs: its ``size`` file says how many slots the workflow made.
POOL = "SNAKEDDP_GPU_POOL"
FOLDER = Path(".snakemake/snakeddp/gpu-slots")
#: How often a job that waits for GPUs tries again.
POLL_S = 1.0
#: Seconds a job waited for its GPUs, set beside CUDA_VISIBLE_DEVICES in the job's environment.
WAITED = "SNAKEDDP_GPU_WAIT_S"

# Held by the job's process until it ends: closing a descriptor would free its GPU.
_held: list[int] = []


def slots(user_resources: Mapping[str, object], env: Mapping[str, str]) -> int:
    """The pool's size: the user's ``--resources gpu=N``, else the GPUs a process here sees."""
    given = user_resources.get(RESOURCE) if RESOURCE in user_resources else None
    given = getattr(given, "value", given)  # Snakemake's parsed Resource, or the plain number
    return int(given) if given is not None else len(gpus.visible(env))


def prepare(size: int, folder: Path = FOLDER) -> None:
    """The pool's folder with its size, before the first job (jobs of an older invocation are gone by then:
    Snakemake's lock keeps one invocation per working directory)."""
    atomic_write_text(folder / "size", f"{size}\n")


def named(gpu: gpus.Gpu) -> str:
    """A GPU as nvidia-smi would find it: its index, model and UUID."""
    return f"GPU {gpu.bus} ({gpu.model}, {gpu.uuid})"


def take(devices: int, env: Mapping[str, str]) -> dict[str, str]:
    """``devices`` GPUs for this job's ranks, held while the job lives: the CUDA_VISIBLE_DEVICES they start with
    (none where the workflow made no pool, as for a run started by hand)."""
    try:
        folder = Path(env[POOL])
        size = int((folder / "size").read_text(encoding="utf-8"))
    except (KeyError, OSError, ValueError):
        return {}
    shown = gpus.visible(env)
    if not shown:
        return {}
    locks = gpulocks.folder(env)
    if size > len(shown):
        chosen = shared_slots(folder, size, shown, devices)
        attempt = functools.partial(hold_all, locks, chosen, shared=True)
    else:
        attempt = functools.partial(hold_free, locks, shown, devices)
    waiting, began = False, time.monotonic()
    while isinstance(taken := attempt(), str):
        if not waiting:
            say(f"snakeddp: waiting for {devices} GPU{'s' if devices > 1 else ''} of this machine: {taken}.")
            waiting = True
        time.sleep(POLL_S)
    _held.extend(descriptor for _, descriptor in taken)
    return {gpus.VISIBLE: ",".join(gpu.uuid for gpu, _ in taken), WAITED: f"{time.monotonic() - began:.3f}"}


def waited(env: Mapping[str, str]) -> dict[str, float]:
    """How long the job waited for its GPUs (the local platform's queue: a try's account), where it took them
    from the pool; nothing where it did not (a CPU run, a run started by hand)."""
    try:
        return {"queue_wait_s": float(env[WAITED])}
    except (KeyError, ValueError):
        return {}


def held_elsewhere(locks: Path, held: list[gpus.Gpu]) -> str:
    """Which GPUs other snakeddp runs hold, and by which processes, for the line that says a job waits."""
    said = []
    for gpu in held:
        pids = gpulocks.holders(locks, gpu.uuid)
        by = f" (pid {', '.join(map(str, pids))})" if pids else ""
        said.append(f"{named(gpu)} held by another snakeddp run{by}")
    return "; ".join(said)


def hold_all(locks: Path, chosen: list[gpus.Gpu], shared: bool) -> list[tuple[gpus.Gpu, int]] | str:
    """Every GPU of ``chosen`` held, or none and why (another run holds one of its own)."""
    taken = [(gpu, gpulocks.hold(locks, gpu.uuid, shared)) for gpu in chosen]
    if all(descriptor is not None for _, descriptor in taken):
        return taken
    release(taken)
    return held_elsewhere(locks, [gpu for gpu, descriptor in taken if descriptor is None])


def hold_free(locks: Path, shown: list[gpus.Gpu], devices: int) -> list[tuple[gpus.Gpu, int]] | str:
    """``devices`` GPUs of their own, none that another program computes on, or why the job waits; refused
    where other programs' work leaves fewer GPUs than the run's ranks."""
    taken, elsewhere, busy = [], [], {}
    with gpuuse.asking() as use_of:
        for gpu in shown:
            if len(taken) == devices:
                break
            descriptor = gpulocks.hold(locks, gpu.uuid)
            if descriptor is None:
                elsewhere.append(gpu)
                continue
            # Asked once held: a process on a GPU whose lock this job holds is no snakeddp run's (or one's left
            # over), where asked before it could be a run's that just ended.
            why = use_of(gpu.uuid).busy()
            if why is None:
                taken.append((gpu, descriptor))
            else:
                os.close(descriptor)
                busy[gpu] = why
    said = "; ".join(f"{named(gpu)} busy: {why}" for gpu, why in busy.items())
    if len(shown) - len(busy) < devices:
        release(taken)
        raise LaunchError(refusal(devices, shown, said, len(shown) - len(busy)))
    if len(taken) < devices:
        release(taken)
        return "; ".join(filter(None, [held_elsewhere(locks, elsewhere), said]))
    if busy:
        say(f"snakeddp: {said}; the run takes {', '.join(named(gpu) for gpu, _ in taken)}.")
    return taken


def refusal(devices: int, shown: list[gpus.Gpu], said: str, left: int) -> str:
    """The line that refuses a run whose ranks other programs' work leaves too few GPUs."""
    ranks = f"{devices} rank{'s' if devices > 1 else ''} need{'' if devices > 1 else 's'} {devices} GPU"
    busy = len(shown) - left
    free = "the GPU is free (nvidia-smi lists the processes on it)"
    if busy > 1:
        free = "they are free (nvidia-smi lists the processes on them)"
    fewer = f", or set launch.devices: {left} or fewer" if left else ""
    if not busy:  # more ranks than GPUs, which the workflow refuses before any job: a run started otherwise
        shows = f"{len(shown)} GPU{'s' if len(shown) > 1 else ''}"
        return (
            f"the run's {ranks}{'s' if devices > 1 else ''} of their own, and this machine shows {shows}. "
            f"HINT: set launch.devices: {len(shown)} or fewer."
        )
    return (
        f"the run's {ranks}{'s' if devices > 1 else ''} of {'their' if devices > 1 else 'its'} own, and of the "
        f"{len(shown)} this machine shows {busy} {'are' if busy > 1 else 'is'} busy with other work: {said}. "
        f"HINT: run it again when {free}{fewer}."
    )


def release(taken: list[tuple[gpus.Gpu, int | None]]) -> None:
    for _, descriptor in taken:
        if descriptor is not None:
            os.close(descriptor)


def shared_slots(folder: Path, size: int, shown: list[gpus.Gpu], devices: int) -> list[gpus.Gpu]:
    """``devices`` free slots of the workflow's pool on distinct GPUs, held while the job lives (Snakemake
    starts no more GPU jobs than slots, so a job finds them free), for runs the user asked to share GPUs."""
    chosen: list[int] = []
    for slot in range(size):
        gpu = slot % len(shown)
        if len(chosen) == devices or gpu in (held % len(shown) for held in chosen):
            continue
        descriptor = os.open(folder / f"slot-{slot}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            continue
        _held.append(descriptor)
        chosen.append(slot)
    if len(chosen) < devices:
        raise LaunchError(
            f"the run's {devices} ranks need {devices} GPUs of their own, and {len(chosen)} of this machine's "
            f"{len(shown)} are free on distinct GPUs in the workflow's pool of {size} slots (--resources "
            f"{RESOURCE}={size} shares them between runs). HINT: run without --resources {RESOURCE}, which gives "
            "each run GPUs of its own, or with --nolock only when no other invocation uses this directory."
        )
    return [shown[slot % len(shown)] for slot in chosen]
