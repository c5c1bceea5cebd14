"""A training run's layout as Slurm resources, in the terms snakemake-executor-plugin-slurm reads.

One Slurm task per training process. The plugin wants an `mpi` job to give `tasks_per_node` or
`tasks` (not both), each above 1: several processes per node give `tasks_per_node` (Lightning
reads SLURM_NTASKS_PER_NODE), one per node gives `tasks`. 0 and "" leave a resource unset.

`mpi` is declared even for a one-process run, empty (the submit plugin skips an empty one), so
that the jobstep plugin never wraps the rule in its own one-task `srun` step: training would
share that step with Snakemake, and a preemption signal to the step would stop Snakemake too.

GPUs are asked for as `gres` per node (`gpu:[TYPE:]N`, TYPE from the profile's site.gpu_type, else the
one type the ranks' build runs where the partitions also hold types it cannot: snakeddp.slurm.mixed),
never as the plugin's `gpu`/`gpu_model` (a job total, `--gpus`, which does not say per node).
Site options (partition, account, constraint, qos) are the profile's resources, not these.
Asked by the slurm contract's ``resources`` hook while the Snakefile is read, so it stays free of heavy imports.
"""

from __future__ import annotations

from snakeddp import platforms
from snakeddp.config import site as site_config
from snakeddp.config.parts import Launch, Site
from snakeddp.slurm import PLATFORM

ONE_TASK_PER_PROCESS = ("srun", "mpirun")
#: The train rule's resources this module sets, each one the plugin reads.
RESOURCES = ("mpi", "tasks_per_node", "tasks", "tasks_per_gpu", "cpus_per_task", "gres")


def gres(devices: int, gpu_type: str | None) -> str:
    """The GPUs of one node as Slurm's --gres names them: ``gpu:N``, or ``gpu:TYPE:N``."""
    return f"gpu:{gpu_type}:{devices}" if gpu_type else f"gpu:{devices}"


def slurm_resources(launch: Launch, accelerator: str, site: Site) -> dict[str, int | str]:
    """Resources of the train rule for one run's ``launch`` section, its ``accelerator`` resolved
    for the platform (snakeddp.config.site.resolved) and the profile's ``site`` (nodes and mem_mb
    are set elsewhere)."""
    launcher = platforms.row(PLATFORM).default_launcher if launch.launcher == "auto" else launch.launcher
    nodes, devices = launch.nodes, launch.devices
    cpus = site_config.cpus_per_process(launch, accelerator, site)
    one_task_per_process = launcher in ONE_TASK_PER_PROCESS
    per_node = devices if one_task_per_process and devices > 1 else 0
    tasks = nodes if one_task_per_process and nodes > 1 and not per_node else 0
    gpu = accelerator == "gpu"
    return {
        "mpi": launcher if per_node or tasks else "",
        "tasks_per_node": per_node,
        "tasks": tasks,
        # 0, never unset: on a GPU job the plugin falls back to `tasks` for --ntasks-per-gpu, which
        # needs cons_tres and binds each task to one GPU (--gpu-bind=single:1; plugin issues #316,
        # #373); every rank is meant to see its node's GPUs and pick cuda:<local rank>.
        "tasks_per_gpu": 0,
        # torchrun (one task) starts all of a node's processes itself.
        "cpus_per_task": cpus if one_task_per_process else cpus * devices,
        "gres": gres(devices, site.gpu_type) if gpu else "",
    }
