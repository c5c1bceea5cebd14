"""Slurm partitions that mix GPUs the ranks' torch build runs with GPUs it cannot (A100s beside V100s under the
CUDA 13.0 build, whose kernels start at compute capability 7.5): an untyped ``--gres=gpu:N`` may be given the
V100s, where every rank would stop after the queue, and the refusal there is not retried. So a GPU train job
asks for the one type the build runs (``--gres=gpu:a100:N``, from the nodes' GRES), or, where it runs several
types (one --gres names one), leaves out the nodes with the others (sbatch --exclude, beside the nodes where
a run hung: snakeddp.slurm.exclude). A declared ``site.gpu_type`` always wins. Said once per invocation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from snakeddp.slurm.nodes import Partition, runnable


@dataclass(frozen=True)
class MixedGpus:
    """What GPU train jobs do about GPUs their build cannot run."""

    #: The one type they ask for (None: untyped).
    gpu_type: str | None = None
    #: The nodes untyped ones leave out.
    left_out: tuple[str, ...] = ()


def typed_request(partitions: Iterable[Partition], build: str | None) -> tuple[str | None, list[str]]:
    """The GPU type a job of torch's CUDA ``build`` asks for (``--gres=gpu:TYPE:N``) where the nodes that are up
    in ``partitions`` also hold GPUs of types the build has no kernels for, which an untyped ``--gres=gpu:N``
    could be given (a V100 beside A100s under the 13.0 build): the one type it runs (None where it runs several,
    or untyped GPUs, or every type there), and the types it cannot run."""
    kinds = {kind for partition in partitions for node in partition.up for kind in node.gpus}
    cannot = sorted(kind for kind in kinds if kind and not runnable(kind, build))
    can = [kind for kind in kinds if kind is None or runnable(kind, build)]
    if not build or not cannot or len(can) != 1 or can[0] is None:
        return None, cannot
    return can[0], cannot


def nodes_with(partitions: Iterable[Partition], kinds: Iterable[str]) -> list[str]:
    """The nodes that are up in ``partitions`` and hold GPUs of any of these types: what an untyped GPU job
    leaves out (sbatch --exclude) where the build cannot run them and one --gres cannot name the types it can."""
    kinds = set(kinds)
    return sorted({node.name for p in partitions for node in p.up if kinds & set(node.gpus)})


def decide(partitions: list[Partition], build: str | None, say: Callable[[str], None]) -> MixedGpus:
    """What GPU train jobs of torch's CUDA ``build`` do on ``partitions`` (the training rules'), said in one line
    where it is anything but asking for any GPU."""
    chosen, cannot = typed_request(partitions, build)
    kinds = {kind for partition in partitions for node in partition.up for kind in node.gpus}
    if not cannot or kinds <= set(cannot):  # none there that it runs: the check refuses the runs, with a HINT
        return MixedGpus()
    names = ", ".join(sorted({p.name for p in partitions}))
    why = f"Slurm partition {names} also has {', '.join(cannot)} GPUs, which torch's CUDA {build} build has no"
    if chosen:
        say(f"snakeddp: GPU train jobs ask for {chosen} GPUs (--gres=gpu:{chosen}:N): {why} kernels for.")
        return MixedGpus(gpu_type=chosen)
    left_out = tuple(nodes_with(partitions, cannot))
    say(
        f"snakeddp: GPU train jobs leave out {', '.join(left_out)} (sbatch --exclude): {why} kernels for, and one "
        "--gres cannot name every type it runs (site.gpu_type names one)."
    )
    return MixedGpus(left_out=left_out)


def left_out(mixed: MixedGpus, job: Any) -> set[str]:
    """The nodes ``job`` leaves out: those of ``mixed`` where it asks for GPUs untyped (``gres`` gpu:N)."""
    gres = str((getattr(job, "resources", None) or {}).get("gres") or "")
    return set(mixed.left_out) if re.fullmatch(r"gpu:\d+", gres) else set()
