"""What every process of an AzureML job gets in its environment."""

import json

from snakeddp import config
from snakeddp.azureml.plan import job_variables
from snakeddp.config import parts
from snakeddp.run import variables as runenv

LAUNCH = parts.Launch.of(config.validate({"launch": {"threads_per_process": 2, "devices": 4}})["launch"])


def test_network_env_tracking_and_site_reach_the_job():
    network_env = {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5"}
    env = {
        **network_env,
        runenv.NETWORK: json.dumps({"env": network_env}),
        runenv.TRACKING: '{"mlflow": {"enabled": true}}',
        runenv.SITE: '{"accelerator": "gpu"}',
        "HOME": "/root",
    }
    variables = job_variables(LAUNCH, "pytorch", "gpu-cluster", "v2", env)
    assert variables["NCCL_DEBUG"] == "INFO" and variables["NCCL_IB_HCA"] == "mlx5"
    assert variables[runenv.TRACKING] == '{"mlflow": {"enabled": true}}'
    assert variables[runenv.SITE] == '{"accelerator": "gpu"}', "ranks resolve auto as the submitter did"
    assert "HOME" not in variables
    assert variables["LOCAL_WORLD_SIZE"] == "4" and variables["OMP_NUM_THREADS"] == "2"


def test_the_submitting_shells_network_variables_stay_behind():
    # A login node's interface name and an exported debug level: not the config's, so not the job's.
    env = {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "eth0", runenv.NETWORK: '{"env": {"NCCL_DEBUG": "WARN"}}'}
    variables = job_variables(LAUNCH, "pytorch", "gpu-cluster", "v2", env)
    assert variables["NCCL_DEBUG"] == "WARN"
    assert "NCCL_SOCKET_IFNAME" not in variables and "GLOO_SOCKET_IFNAME" not in variables


def test_nothing_is_forwarded_that_the_workflow_did_not_set():
    variables = job_variables(LAUNCH, "mpi", "gpu-cluster", "v1", {"NCCL_DEBUG": "INFO"})
    assert runenv.TRACKING not in variables and runenv.SITE not in variables
    assert not any(name.startswith(("NCCL_", "GLOO_")) for name in variables)


def test_an_mpi_job_gets_the_launchs_master_port_and_a_pytorch_job_leaves_it_to_azureml():
    launch = parts.Launch.of(config.validate({"launch": {"devices": 4, "master_port": 29600}})["launch"])
    assert job_variables(launch, "mpi", "gpu-cluster", "v1", {})["MASTER_PORT"] == "29600"
    assert "MASTER_PORT" not in job_variables(launch, "pytorch", "gpu-cluster", "v1", {})
