"""TorchDistributor (pyspark.ml.torch): the spark platform's launcher, one rank per Spark task.

snakeddp.launch starts the run's Spark driver (``snakeddp.spark.driver``); its TorchDistributor
starts a barrier stage of ``world size`` tasks, and each task runs torchrun with one process
(``--nnodes=<world size> --node_rank=<task>``), so every rank sees torchrun's variables with
LOCAL_WORLD_SIZE 1. The distributor's rendezvous id (``PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID``) tells
its ranks from a plain torchrun's, and ``snakeddp.spark.rank`` adds the Spark application id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snakeddp.cluster.base import LaunchPlan
from snakeddp.cluster.torchrun import TorchRun

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment

    from snakeddp.cluster.base import Layout

DRIVER = "snakeddp.spark.driver"
RDZV_ID = "PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID"  # set by TorchDistributor in every task it starts
APP_ID = "SNAKEDDP_SPARK_APP_ID"  # the Spark application, set by snakeddp.spark.rank
MASTER = "SNAKEDDP_SPARK_MASTER"  # the master URL it ran on, likewise
STAGE_ID = "SNAKEDDP_SPARK_STAGE_ID"  # the barrier stage, set by snakeddp.spark.stage (not under torchrun)
# Where the rank's task ran, found by snakeddp.spark.rank in its ancestry (the executor's JVM).
EXECUTOR_ID = "SNAKEDDP_SPARK_EXECUTOR_ID"
EXECUTOR_HOST = "SNAKEDDP_SPARK_EXECUTOR_HOST"
EXECUTOR_PID = "SNAKEDDP_SPARK_EXECUTOR_PID"


def executor(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The executor a rank runs in (provenance's ranks[].executor), or None outside Spark: with the GPU
    addresses its task was given, which TorchDistributor sets as the rank's CUDA_VISIBLE_DEVICES ([] on CPUs)."""
    if EXECUTOR_ID not in env:
        return None
    pid = env.get(EXECUTOR_PID, "")
    return {
        "id": env[EXECUTOR_ID],
        "host": env.get(EXECUTOR_HOST) or None,
        "pid": int(pid) if pid.isdigit() else None,
        "gpus": gpus_given(env),
    }


def gpus_given(env: Mapping[str, str]) -> list[str]:
    """A Spark rank's GPU addresses, as TorchDistributor set its CUDA_VISIBLE_DEVICES."""
    return [address.strip() for address in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if address.strip()]


class TorchDistributor(TorchRun):
    """torchrun's table under a Spark task; the job id is the Spark application's."""

    name = "torchdistributor"
    variables = {**TorchRun.variables, "job_id": APP_ID}
    # The driver is signalled by snakeddp.launch only; it passes stops on to the ranks itself.
    own_session = True
    places_ranks = True

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return RDZV_ID in env and "LOCAL_WORLD_SIZE" in env

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        from lightning.fabric.plugins.environments import TorchElasticEnvironment

        from snakeddp.cluster.environment import agreeing

        return agreeing(TorchElasticEnvironment(), layout)

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        # Spark places the ranks: nodes x devices is only their number (one rank per task).
        argv = [plan.python, "-m", DRIVER, f"--num-processes={plan.world_size}"]
        argv += [f"--threads={plan.threads_per_process}", *(["--gpu"] if plan.gpus else []), "--"]
        return [*argv, *plan.entry], dict(plan.extra_env)
