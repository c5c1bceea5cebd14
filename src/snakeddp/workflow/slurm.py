"""A training run's layout as Slurm resources, in the terms snakemake-executor-plugin-slurm reads.

One Slurm task per training process. The plugin wants an `mpi` job to give `tasks_per_node` or
`tasks` (not both), each above 1: several processes per node give `tasks_per_node` (Lightning
reads SLURM_NTASKS_PER_NODE), one per node gives `tasks`. 0 and "" leave a resource unset.

`mpi` is declared even for a one-process run, empty (the submit plugin skips an empty one), so
that the jobstep plugin never wraps the rule in its own one-task `srun` step: training would
share that step with Snakemake, and a preemption signal to the step would stop Snakemake too.
Imported by rules/common.smk, so it stays free of heavy imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from snakeddp.cluster import PLATFORM_DEFAULT

ONE_TASK_PER_PROCESS = ("srun", "mpirun")


def slurm_resources(launch: Mapping[str, Any]) -> dict[str, int | str]:
    """Resources of the train rule for one run's ``launch`` section (nodes and mem_mb come as is)."""
    launcher = PLATFORM_DEFAULT["slurm"] if launch["launcher"] == "auto" else launch["launcher"]
    nodes, devices, threads = launch["nodes"], launch["devices"], launch["threads_per_process"]
    one_task_per_process = launcher in ONE_TASK_PER_PROCESS
    per_node = devices if one_task_per_process and devices > 1 else 0
    tasks = nodes if one_task_per_process and nodes > 1 and not per_node else 0
    gpu = launch["accelerator"] == "gpu"
    return {
        "mpi": launcher if per_node or tasks else "",
        "tasks_per_node": per_node,
        "tasks": tasks,
        # With `tasks` on GPUs the plugin adds --ntasks-per-gpu=<tasks>; one task per GPU is meant.
        "tasks_per_gpu": 1 if gpu and tasks else 0,
        # torchrun (one task) starts all of a node's processes itself.
        "cpus_per_task": threads if one_task_per_process else threads * devices,
        "gres": f"gpu:{devices}" if gpu else "",
    }
