"""snakeddp.platforms as lower floors ask it: by what a process sees, never by a platform's name."""

from __future__ import annotations

import pytest

from snakeddp import cluster, platforms
from snakeddp.cluster import LaunchError, LaunchPlan

SLURM_STEP = {"SLURM_JOB_ID": "4242", "SLURMD_NODENAME": "gpu07", "SLURM_JOB_NODELIST": "gpu07", "SLURM_JWT": "x"}
AZUREML_NODE = {"AZUREML_RUN_ID": "run-1", "AZUREML_NODE_NAME": "tvm-1", "AZ_BATCH_MASTER_NODE": "10.0.0.4:6105"}


def test_recorded_names_are_every_job_sides_and_no_token():
    recorded = platforms.recorded_names()
    assert {"SLURM_JOB_ID", "SLURMD_NODENAME", "AZUREML_RUN_ID", "AZ_BATCH_MASTER_NODE"} <= recorded
    assert not {name for name in recorded if "TOKEN" in name or "JWT" in name}


@pytest.mark.parametrize(
    ("env", "node", "job"), [(SLURM_STEP, "gpu07", "4242"), (AZUREML_NODE, "tvm-1", "run-1"), ({}, None, None)]
)
def test_a_ranks_node_and_job_are_its_platforms(env, node, job):
    assert (platforms.scheduler_node(env), platforms.job_id(env)) == (node, job)


def test_rank_zeros_address_is_what_the_platform_exports():
    assert platforms.rendezvous(AZUREML_NODE) == ("10.0.0.4", 6105)
    assert platforms.rendezvous({"AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.5"}) == ("10.0.0.5", None)
    assert platforms.rendezvous({}) == (None, None)


def test_mpirun_runs_inside_an_allocation_only_where_a_scheduler_gave_one():
    assert platforms.allocation({}) is None and platforms.allocation(AZUREML_NODE) is None
    assert platforms.allocation(SLURM_STEP) is not None


def test_a_one_node_launcher_sends_a_bigger_run_to_the_platforms_that_run_more():
    plan = LaunchPlan(nodes=2, devices=1, threads_per_process=1, master_port=None, python="python", entry=())
    with pytest.raises(LaunchError, match="HINT: use the ") as refused:
        cluster.get("direct").command(plan, {})
    named = [name for name in platforms.names() if f" {name} " in str(refused.value)]
    assert named == list(platforms.multi_node()) and "local" not in named


def test_the_launchers_platforms_own_are_asked_before_the_generic_ones_their_processes_also_match():
    order = [launcher.name for launcher in cluster.all_launchers()]
    assert order.index("torchdistributor") < order.index("torchrun")
    assert order.index("mpirun") < order.index("srun") < order.index("env")
    assert order[-1] == "spawn"
