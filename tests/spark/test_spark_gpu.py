"""`snakemake --profile spark` with a GPU run against a real standalone cluster whose worker offers two
GPUs through a discovery script that reports their addresses, as Spark's own tests fake GPUs: no GPU
is really there, so each rank gets its own address and then stops on its CUDA check. Nothing declares
that the executors have GPUs: launch.accelerator auto is gpu because the master says its worker offers them."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.helpers import TINY, Workflow, subprocess_env

pytestmark = [pytest.mark.e2e, pytest.mark.dev_venv]  # the spark profile's driver imports pyspark

GPU_RUN = {
    **TINY,
    "trainer": {**TINY["trainer"], "max_epochs": 1},
    "launch": {**TINY["launch"], "devices": 2, "accelerator": "auto"},
}
PLACED = re.compile(
    r"^snakeddp\.spark: rank (?P<rank>\d+) in executor (?P<executor>\S+) on 127\.0\.0\.1 "
    r"with GPU (?P<gpu>\S+) \(CUDA_VISIBLE_DEVICES=(?P<visible>\S+)\)$",
    re.M,
)


# What an executor JVM logs of the resources its worker gave it (Spark's ResourceUtils.logResourceInfo).
EXECUTOR_GPUS = re.compile(r"gpu -> \[name: gpu, addresses: (?P<addresses>[^\]]*)\]")


def hint_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "HINT:" in line]


def executor_gpus(cluster_directory: Path) -> dict[str, str]:
    """Spark's own record of the newest application's executors' GPUs: executor id -> its addresses, read
    from each executor's log in its worker's work directory (<work>/<app>/<executor id>/stderr)."""
    apps = sorted(cluster_directory.glob("worker-*/app-*"), key=lambda app: app.name)
    assert apps, f"no application ran on the cluster in {cluster_directory}"
    found = {}
    for log in apps[-1].parent.parent.glob(f"worker-*/{apps[-1].name}/*/stderr"):
        if match := EXECUTOR_GPUS.search(log.read_text()):
            found[log.parent.name] = match["addresses"]
    return found


def test_gpu_ranks_get_their_own_gpu_address_and_refused_resource_settings_are_spark_s_words(
    spark_gpu_cluster, tmp_path
):
    """One application that starts (the other stops in the driver's JVM before any executor): a first
    run whose spark.conf asks two GPUs per task, which the one-GPU executors cannot give, refused in
    one line naming the settings, not the master; then what its HINT says, the run without it."""
    flow = Workflow(tmp_path, profile="spark")
    flow.write_config({**GPU_RUN, "spark": {"conf": {"spark.task.resource.gpu.amount": 2}}})
    env = subprocess_env(**spark_gpu_cluster.env())
    log_file = flow.directory / "logs/train/base.log"
    started = time.perf_counter()
    done = flow.run(check=False, env=env)
    refused_s = time.perf_counter() - started
    decided = [line for line in done.stderr.splitlines() if "launch.accelerator auto on Spark" in line]
    assert decided == [
        "snakeddp: launch.accelerator auto on Spark means gpu (the master at 127.0.0.1:"
        f"{spark_gpu_cluster.ui_port} says: 1 worker alive offering 2 GPUs)."
    ], done.stderr[-3000:]
    log = log_file.read_text()
    lines = hint_lines(log)
    assert done.returncode != 0 and len(lines) == 1, log[-4000:]
    assert "Spark refused the run's resource settings" in lines[0], lines[0]
    assert "The executor resource: gpu, amount: 1 needs to be >= the task resource request amount of 2.0" in lines[0]
    assert "spark.authenticate" not in lines[0] and "Traceback" not in log, log[-4000:]

    # The HINT: remove the setting from spark.conf and let the driver set it.
    flow.write_config(GPU_RUN)
    started = time.perf_counter()
    done = flow.run(check=False, env=env)
    placed_s = time.perf_counter() - started
    log = log_file.read_text()
    placed = {int(m["rank"]): m.groupdict() for m in PLACED.finditer(log)}
    assert sorted(placed) == [0, 1], log[-4000:]
    # Spark gave each rank's executor one of the worker's two GPUs, and TorchDistributor showed each rank
    # only its own.
    assert sorted(p["gpu"] for p in placed.values()) == spark_gpu_cluster.gpus["worker-1"] == ["90", "91"]
    assert len({p["executor"] for p in placed.values()}) == 2, placed
    # Against Spark's own record: the executor each rank ran in was given that GPU by its worker.
    assert {p["executor"]: p["gpu"] for p in placed.values()} == executor_gpus(spark_gpu_cluster.directory)
    # Each rank stops on its own CUDA check, and the run ends in that one line, printed once; the rank
    # says what its process saw, one of the two GPUs only.
    lines = hint_lines(log)
    assert done.returncode != 0 and len(lines) == 1, log[-4000:]
    assert lines[0].startswith("snakeddp.train: ") and "torch sees no CUDA device" in lines[0], lines[0]
    (seen,) = re.findall(r"CUDA_VISIBLE_DEVICES=([^;]*);", lines[0])
    assert seen in {p["visible"] for p in placed.values()}, lines[0]
    assert "Traceback" not in log and "Py4JJavaError" not in log, log[-4000:]
    run_dir = flow.directory / "results/runs/base"
    assert not (run_dir / "provenance.json").exists() and not (run_dir / "spark").exists()
    print(
        f"refused settings: {refused_s:.1f} s (data, environment, the driver's JVM); GPU ranks placed: {placed_s:.1f} s"
    )
