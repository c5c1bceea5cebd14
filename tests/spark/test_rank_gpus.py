"""Each spark rank's GPU addresses, from its task's CUDA_VISIBLE_DEVICES (TorchDistributor's) through its
executor entry (snakeddp.cluster.torchdistributor.executor) to provenance's launch.spark.executors; the
real ranks record theirs in test_spark_profile.py (CPUs) and say them in test_spark_gpu.py (GPUs)."""

import jsonschema

from snakeddp.cluster import torchdistributor
from snakeddp.provenance import record
from snakeddp.provenance.schema import schema


def test_each_ranks_gpus_reach_its_executor_entry_in_provenance():
    assert torchdistributor.gpus_given({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert torchdistributor.gpus_given({"CUDA_VISIBLE_DEVICES": ""}) == torchdistributor.gpus_given({}) == []
    ranks = [
        {"rank": rank, "executor": torchdistributor.executor({
            torchdistributor.EXECUTOR_ID: str(rank), torchdistributor.EXECUTOR_HOST: "127.0.0.1",
            torchdistributor.EXECUTOR_PID: str(100 + rank), "CUDA_VISIBLE_DEVICES": visible})}
        for rank, visible in ((0, "1"), (1, "0"))
    ]  # fmt: skip
    env = {torchdistributor.APP_ID: "app-1", torchdistributor.MASTER: "spark://h:7077"}
    section = record.spark_section(env, ranks)
    assert [(e["rank"], e["gpus"]) for e in section["executors"]] == [(0, ["1"]), (1, ["0"])]
    jsonschema.validate(section, schema()["properties"]["launch"]["properties"]["spark"])
