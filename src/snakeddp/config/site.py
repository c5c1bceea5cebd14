"""What a run asks of the nodes it lands on, from its ``launch:`` and the profile's ``site:``.

``launch.accelerator: auto`` cannot be resolved from this machine for a cluster's nodes, so on
slurm, azureml and spark it means what the profile declares (``site.accelerator``), and with nothing
declared it is refused before anything is submitted: a GPU cluster never trains on its CPUs
unasked. The workflow (Slurm resources, preflight) and every rank (``SNAKEDDP_SITE``) resolve it
with the same function. Pure: no torch, no I/O but reading the local machine's driver directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.errors import ConfigError

# Host memory of a CPU run's node when launch.mem_mb is null (the default before GPUs were sized).
CPU_MEM_MB_PER_NODE = 4000
# Present when an NVIDIA driver is loaded: how the local platform resolves auto without importing torch.
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
CLUSTER_PLATFORMS = ("slurm", "azureml", "spark", "databricks")


class SiteError(ConfigError):
    """What the profile declares about its nodes does not settle the run's request."""


def accelerator(requested: str, platform: str, site: Mapping[str, Any], *, run_id: str | None = None) -> str:
    """``requested`` (a run's launch.accelerator) where it runs: cpu or gpu; auto on the local
    platform stays auto (torch decides in each rank, from the GPUs it sees)."""
    if requested != "auto" or platform not in CLUSTER_PLATFORMS:
        return requested
    declared = site.get("accelerator")
    if declared is None:
        where = f"run {run_id}: " if run_id else ""
        raise SiteError(
            f"{where}launch.accelerator is auto, and the {platform} profile does not say what its nodes have "
            "(site.accelerator), so this machine cannot tell GPU nodes from CPU ones. HINT: declare it in the "
            'profile\'s config: entries ("site={accelerator: gpu}", or cpu), or set launch.accelerator: gpu (or cpu).'
        )
    return declared


def local_accelerator(requested: str) -> str:
    """auto on this machine: gpu when an NVIDIA driver is loaded, else cpu."""
    if requested != "auto":
        return requested
    return "gpu" if NVIDIA_GPUS.is_dir() else "cpu"


def resolved(launch: Mapping[str, Any], platform: str, site: Mapping[str, Any], *, run_id: str | None = None) -> str:
    """The run's accelerator where it runs, as the workflow checks and sizes its jobs: cpu or gpu."""
    if platform in CLUSTER_PLATFORMS:
        return accelerator(launch["accelerator"], platform, site, run_id=run_id)
    return local_accelerator(launch["accelerator"])


def mem_mb(launch: Mapping[str, Any], resolved: str, site: Mapping[str, Any]) -> int:
    """Host memory per node: launch.mem_mb when set, else site.mem_mb_per_gpu per GPU rank (CPU: a flat
    default). ``site`` is validated (the schema's defaults filled in), as the workflow and ranks read it."""
    if launch.get("mem_mb") is not None:
        return int(launch["mem_mb"])
    if resolved == "gpu":
        return int(launch["devices"]) * int(site["mem_mb_per_gpu"])
    return CPU_MEM_MB_PER_NODE


def cpus_per_process(launch: Mapping[str, Any], resolved: str, site: Mapping[str, Any]) -> int:
    """CPU cores each rank is given by the scheduler: its threads, and on a GPU site.cpus_per_gpu at least."""
    threads = int(launch["threads_per_process"])
    return max(threads, int(site["cpus_per_gpu"])) if resolved == "gpu" else threads
