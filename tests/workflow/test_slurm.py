"""A run's layout turned into sbatch options by snakemake-executor-plugin-slurm's own code.

The plugin multiplies tasks for some combinations of `tasks`, `gpu`/`gres` and `mpi`; these
tests feed it the train rule's resources and read back the sbatch command it would run.
"""

import re
from types import SimpleNamespace

import pytest
from snakemake.iocontainers import ResourceList
from snakemake_executor_plugin_slurm.submit_string import get_submit_command
from snakemake_executor_plugin_slurm.utils import set_gres_string

from snakeddp import config
from snakeddp.workflow.slurm import slurm_resources


def sbatch_options(**launch) -> str:
    resolved = config.validate({"launch": launch})["launch"]
    resources = {"nodes": resolved["nodes"], "mem_mb": resolved["mem_mb"], "runtime": resolved["runtime"]}
    resources.update(slurm_resources(resolved))
    job = SimpleNamespace(resources=ResourceList(fromdict=resources), threads=1)
    params = {
        "run_uuid": "run",
        "slurm_logfile": "log",
        "comment_str": "c",
        "account": "",
        "partition": "",
        "workdir": "",
    }
    return get_submit_command(job, params) + set_gres_string(job)


def options(command: str) -> dict[str, str]:
    return dict(re.findall(r"--(nodes|ntasks|ntasks-per-node|ntasks-per-gpu|cpus-per-task|gres|gpus)=(\S+)", command))


@pytest.mark.parametrize(
    ("launch", "expected"),
    [
        ({}, {"nodes": "1", "ntasks": "1", "cpus-per-task": "1"}),
        ({"devices": 2, "threads_per_process": 3}, {"nodes": "1", "ntasks-per-node": "2", "cpus-per-task": "3"}),
        ({"nodes": 2}, {"nodes": "2", "ntasks": "2", "cpus-per-task": "1"}),
        ({"nodes": 2, "devices": 4}, {"nodes": "2", "ntasks-per-node": "4", "cpus-per-task": "1"}),
        (
            {"launcher": "mpirun", "nodes": 2, "devices": 2},
            {"nodes": "2", "ntasks-per-node": "2", "cpus-per-task": "1"},
        ),
        # torchrun is one task that starts the node's processes itself.
        (
            {"launcher": "torchrun", "devices": 2, "threads_per_process": 2},
            {"nodes": "1", "ntasks": "1", "cpus-per-task": "4"},
        ),
        # GPUs per node, one task per GPU, never --ntasks-per-gpu=<all tasks>.
        ({"accelerator": "gpu"}, {"nodes": "1", "cpus-per-task": "1", "gres": "gpu:1"}),
        (
            {"accelerator": "gpu", "nodes": 2, "devices": 4},
            {"nodes": "2", "ntasks-per-node": "4", "cpus-per-task": "1", "gres": "gpu:4"},
        ),
        (
            {"accelerator": "gpu", "nodes": 2},
            {"nodes": "2", "ntasks": "2", "ntasks-per-gpu": "1", "cpus-per-task": "1", "gres": "gpu:1"},
        ),
    ],
)
def test_one_slurm_task_per_training_process(launch, expected):
    assert options(sbatch_options(**launch)) == expected


def test_every_run_keeps_training_out_of_the_jobstep_srun():
    # The jobstep plugin checks for the key; the submit plugin ignores an empty value.
    assert slurm_resources(config.validate({})["launch"])["mpi"] == ""
    assert slurm_resources(config.validate({"launch": {"devices": 2}})["launch"])["mpi"] == "srun"
