"""What every process of an AzureML job gets in its environment."""

from snakeddp.azureml.plan import job_variables
from snakeddp.run import variables as runenv

LAUNCH = {"threads_per_process": 2, "devices": 4, "master_port": None}


def test_profile_network_tuning_and_tracking_reach_the_job():
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": "mlx5",
        runenv.TRACKING: '{"mlflow": {"enabled": true}}',
        "NCCL_SECRET_TOKEN": "s3cr3t",
        "HOME": "/root",
    }
    variables = job_variables(LAUNCH, "pytorch", "gpu-cluster", "v2", env)
    assert variables["NCCL_DEBUG"] == "INFO" and variables["NCCL_IB_HCA"] == "mlx5"
    assert variables[runenv.TRACKING] == '{"mlflow": {"enabled": true}}'
    assert "NCCL_SECRET_TOKEN" not in variables and "HOME" not in variables
    assert variables["LOCAL_WORLD_SIZE"] == "4" and variables["OMP_NUM_THREADS"] == "2"


def test_nothing_is_forwarded_that_the_workflow_did_not_set():
    variables = job_variables(LAUNCH, "mpi", "gpu-cluster", "v1", {})
    assert runenv.TRACKING not in variables
    assert not any(name.startswith(("NCCL_", "GLOO_")) for name in variables)
