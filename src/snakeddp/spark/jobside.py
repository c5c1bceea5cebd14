"""What the spark platform's ranks see (snakeddp.platforms.jobside): the variables TorchDistributor and
snakeddp.spark.rank set in every task, the executor a rank ran in, and the application provenance records.
Light: every rank imports it (through snakeddp.platforms)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from snakeddp.platforms.jobside import JobSide
from snakeddp.util.redact import redact_text

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


class SparkJobSide(JobSide):
    launchers = {"torchdistributor": "snakeddp.spark.launcher:TorchDistributor"}
    job_id_variables = (APP_ID,)
    multi_node = True

    def placement(self, env: Mapping[str, str]) -> dict[str, Any] | None:
        return executor(env)

    def launch_record(self, env: Mapping[str, str], ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The Spark application a spark run's ranks ran in, and each rank's executor with the GPU addresses
        its task was given."""
        if APP_ID not in env:
            return None
        stage = env.get(STAGE_ID, "")
        return {
            "application_id": env[APP_ID],
            **({"stage_id": int(stage)} if stage.isdigit() else {}),
            "master": redact_text(env.get(MASTER, "")) or None,
            "executors": [{"rank": r["rank"], **r["executor"]} for r in ranks if r.get("executor")],
        }


JOB_SIDE = SparkJobSide()
