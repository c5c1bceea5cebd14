"""This machine's GPUs as a pool its train jobs take from, so that concurrent runs never share a GPU.

Snakemake counts them: the workflow declares a global ``gpu`` resource the size of the GPUs a process
sees (``snakemake --resources gpu=N`` set by the user wins: more slots than GPUs is the user asking runs to
share them), and a GPU run's train job takes ``launch.devices`` of it. Which GPUs a job gets is decided
here, in the job, from slots held with ``flock`` under the workflow's folder: slot k is GPU k modulo the
GPUs, a job takes free slots on distinct GPUs and holds them while it lives (the kernel lets go when it
ends, however it ends), and its ranks see those GPUs only (CUDA_VISIBLE_DEVICES, by UUID, so a user's own
CUDA_VISIBLE_DEVICES is honoured and never renumbered). Snakemake never starts more GPU jobs than slots,
so a job always finds its slots free.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Mapping
from pathlib import Path

from snakeddp.errors import LaunchError
from snakeddp.util import gpus
from snakeddp.util.fsutil import atomic_write_text

#: Snakemake's resource: what a GPU run's train job takes, and the workflow's limit of it.
RESOURCE = "gpu"
#: The pool's folder, for the train jobs: its ``size`` file says how many slots the workflow made.
POOL = "SNAKEDDP_GPU_POOL"
FOLDER = Path(".snakemake/snakeddp/gpu-slots")

# Held by the job's process until it ends: closing a descriptor would free its slot.
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


def take(devices: int, env: Mapping[str, str]) -> dict[str, str]:
    """``devices`` GPUs from the pool for this job's ranks: the CUDA_VISIBLE_DEVICES they start with (none
    where the workflow made no pool, as for a run started by hand)."""
    try:
        folder = Path(env[POOL])
        size = int((folder / "size").read_text())
    except (KeyError, OSError, ValueError):
        return {}
    shown = gpus.visible(env)
    if not shown:
        return {}
    chosen: list[int] = []
    for slot in range(int(size)):
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
    return {gpus.VISIBLE: ",".join(shown[slot % len(shown)].uuid for slot in chosen)}
