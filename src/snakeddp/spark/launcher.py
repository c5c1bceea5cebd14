"""TorchDistributor (pyspark.ml.torch): the spark platform's launcher, one rank per Spark task.

snakeddp.launch starts the run's Spark driver (``snakeddp.spark.driver``); its TorchDistributor
starts a barrier stage of ``world size`` tasks, and each task runs torchrun with one process
(``--nnodes=<world size> --node_rank=<task>``), so every rank sees torchrun's variables with
LOCAL_WORLD_SIZE 1. The distributor's rendezvous id (``PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID``) tells
its ranks from a plain torchrun's, and ``snakeddp.spark.rank`` adds the Spark application id.
Found by snakeddp.cluster through the platform's job side (``snakeddp.spark.jobside``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from snakeddp.cluster.base import LaunchPlan
from snakeddp.cluster.torchrun import TorchRun
from snakeddp.spark.jobside import APP_ID, RDZV_ID

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment

    from snakeddp.cluster.base import Layout

DRIVER = "snakeddp.spark.driver"


class TorchDistributor(TorchRun):
    """torchrun's table under a Spark task; the job id is the Spark application's."""

    name = "torchdistributor"
    variables = {**TorchRun.variables, "job_id": APP_ID}
    # The driver is signalled by snakeddp.launch only; it passes stops on to the ranks itself.
    own_session = True
    places_ranks = True
    # torchrun's variables are set in every task too: this launcher is asked first.
    detect_before = "torchrun"

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
