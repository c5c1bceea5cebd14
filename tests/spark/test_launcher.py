"""The spark platform's launcher: torchrun's variables under a Spark task, the application id as job id."""

import pytest

from snakeddp import cluster
from snakeddp.cluster import LaunchError, LaunchPlan
from snakeddp.spark import jobside

# What one rank of `TorchDistributor(num_processes=2, local_mode=False)` sees (read from a real task):
# torchrun's variables with one process per task, the distributor's rendezvous id, and rank.py's own.
TASK = {
    "PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID": "a4199e8f784431d761e72c825d097352",
    "TORCHELASTIC_RUN_ID": "a4199e8f784431d761e72c825d097352",
    "RANK": "1",
    "LOCAL_RANK": "0",
    "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "1",
    "GROUP_RANK": "1",
    "NODE_RANK": "1",
    "MASTER_ADDR": "192.0.2.2",
    "MASTER_PORT": "43045",
    "CUDA_VISIBLE_DEVICES": "",
    "SNAKEDDP_SPARK_APP_ID": "app-20261124174933-0002",
    "SNAKEDDP_SPARK_EXECUTOR_ID": "1",
    "SNAKEDDP_SPARK_EXECUTOR_HOST": "127.0.0.1",
    "SNAKEDDP_SPARK_EXECUTOR_PID": "30891",
}


def test_a_distributor_task_is_detected_before_torchrun_and_maps_to_one_process_nodes():
    launcher, layout = cluster.resolve(None, TASK)
    assert launcher.name == "torchdistributor" and launcher.places_ranks
    assert (layout.rank, layout.local_rank, layout.world_size, layout.node_rank) == (1, 0, 2, 1)
    assert (layout.num_nodes, layout.local_world_size, layout.job_id) == (2, 1, "app-20261124174933-0002")
    plain = {k: v for k, v in TASK.items() if k != "PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID"}
    assert cluster.detect(plain).name == "torchrun"


def test_only_the_number_of_ranks_must_match_the_config_where_spark_places_them():
    _, layout = cluster.resolve(None, TASK)
    layout.check_matches(nodes=1, devices=2, ranks_only=True)  # the default sweep's devices-2
    with pytest.raises(LaunchError, match="asks for launch.nodes=1 x launch.devices=2"):
        layout.check_matches(nodes=1, devices=2)
    with pytest.raises(LaunchError):
        layout.check_matches(nodes=1, devices=3, ranks_only=True)


def test_the_executor_of_a_rank_is_read_from_its_variables():
    assert jobside.executor(TASK) == {"id": "1", "host": "127.0.0.1", "pid": 30891, "gpus": []}
    assert jobside.executor({**TASK, "CUDA_VISIBLE_DEVICES": "3"})["gpus"] == ["3"]
    assert jobside.executor({}) is None


def test_the_command_starts_the_driver_with_the_world_size():
    plan = LaunchPlan(nodes=1, devices=2, threads_per_process=1, master_port=None, python="py", entry=("--x",))
    argv, _ = cluster.get("torchdistributor").command(plan, {})
    assert argv == ["py", "-m", "snakeddp.spark.driver", "--num-processes=2", "--threads=1", "--", "--x"]


def test_torchdistributor_is_the_spark_platforms_launcher_and_only_there():
    assert cluster.for_platform("auto", "spark").name == "torchdistributor"
    with pytest.raises(LaunchError, match=r"needs the spark or databricks profile .*set launch.launcher: auto"):
        cluster.for_platform("torchdistributor", "local")
    with pytest.raises(
        LaunchError, match=r"starts its ranks with torchdistributor only\. HINT: set launch.launcher: auto"
    ):
        cluster.for_platform("direct", "spark")
