"""Each spark rank's GPU addresses, from its task's CUDA_VISIBLE_DEVICES (TorchDistributor's) through its
executor entry (snakeddp.spark.jobside.executor) to provenance's launch.spark.executors; the
real ranks record theirs in test_spark_profile.py (CPUs) and say them in test_spark_gpu.py (GPUs)."""

import jsonschema

from snakeddp.provenance.schema import schema
from snakeddp.spark import jobside


def test_each_ranks_gpus_reach_its_executor_entry_in_provenance():
    assert jobside.gpus_given({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert jobside.gpus_given({"CUDA_VISIBLE_DEVICES": ""}) == jobside.gpus_given({}) == []
    ranks = [
        {"rank": rank, "executor": jobside.executor({
            jobside.EXECUTOR_ID: str(rank), jobside.EXECUTOR_HOST: "127.0.0.1",
            jobside.EXECUTOR_PID: str(100 + rank), "CUDA_VISIBLE_DEVICES": visible})}
        for rank, visible in ((0, "1"), (1, "0"))
    ]  # fmt: skip
    env = {jobside.APP_ID: "app-1", jobside.MASTER: "spark://h:7077"}
    section = jobside.JOB_SIDE.launch_record(env, ranks)
    assert [(e["rank"], e["gpus"]) for e in section["executors"]] == [(0, ["1"]), (1, ["0"])]
    jsonschema.validate(section, schema()["properties"]["launch"]["properties"]["spark"])
