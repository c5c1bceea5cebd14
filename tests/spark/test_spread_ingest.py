"""Ingestion on the spark platform's executors (snakeddp.spark.ingest, snakeddp.data.spread) on the real 2-worker
standalone cluster: Delta tables written by delta-rs and by Spark, and a Parquet folder of several row groups
per file give the partitions, entries (BLAKE3) and validation set of a local ingestion of the same table, byte
for byte; a bad value read on an executor stops the step in the local ingestion's one line; a cluster whose
cores are all held leaves the table to the step; `snakemake --profile spark` gives `--profile local`'s, also
where its first ingestion was killed outright, which leaves nothing beside the rule's outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pytest
from deltalake import convert_to_deltalake

from snakeddp.data import spread
from snakeddp.data.table import ingest
from snakeddp.spark import ingest as spark_ingest
from snakeddp.spark.session import jvm_start
from tests import tables
from tests.helpers import TINY, Workflow, subprocess_env
from tests.spread_tables import bad_value_said_as_locally, delta_table, parquet_folder, same_files, the_rows

pytestmark = pytest.mark.dev_venv  # the step's application imports pyspark


def cluster_env(cluster) -> dict[str, str]:
    # The spark platform's section as the workflow exports it to its jobs; the master from spark-defaults.conf.
    return {**subprocess_env(), **cluster.env(), "SNAKEDDP_PLATFORM": "spark", "SNAKEDDP_PLATFORM_SECTION": "{}"}


# Spark's own Parquet writer (local[1]), in row groups of at most 1 MB (a window takes several); the data files then
# committed as a Delta table by delta-rs, as tests/spark/test_image_tables.py does (no Maven repository here for
# delta-spark's jars). In this process, on the driver JVM the step's in-process ingestions start and keep (pyspark
# keeps its gateway after a context stops; the next context reuses it): in a python and JVM of their own it took
# 38.7 s of CPU (JVMs included) for -k 'spark-delta or parquet', 34.9 s here.
def spark_delta(folder: Path, rows: pa.Table) -> Path:
    """The rows written by Spark and committed as a Delta table."""
    from pyspark.sql import SparkSession

    source = parquet_folder(folder.with_name("pyarrow"), rows)
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", jvm_start(""))  # where this session is the one that starts the JVM
        .config("spark.hadoop.parquet.block.size", str(1 << 20))
        .getOrCreate()
    )
    try:
        spark.read.parquet(str(source)).write.parquet(str(folder))
    finally:
        spark.stop()
    convert_to_deltalake(str(folder))
    return folder


WRITERS = {"delta": delta_table, "spark-delta": spark_delta, "parquet": parquet_folder}


@pytest.mark.parametrize("kind", list(WRITERS))
def test_the_executors_ingest_the_partitions_a_local_ingestion_writes(spark_cluster, tmp_path, monkeypatch, kind):
    write = WRITERS[kind]
    table = write(tmp_path / "table", the_rows())
    params = tables.params(table, partitions=3)
    ingest(params, tmp_path / "local")
    monkeypatch.chdir(tmp_path)
    summary = spark_ingest.ingest(params, tmp_path / "spark", cluster_env(spark_cluster))

    names = same_files(tmp_path / "local", tmp_path / "spark")
    assert len(names) == 2 * (3 + 1)
    assert summary["pieces"] == 2  # the windowed split's windows (data.split.windows_of), one task each
    assert json.loads((tmp_path / "spark" / "val.json").read_text())["blake3"]
    # Read by the executors' Python workers, in two processes (one per worker), none of them this one.
    readers = {tuple(r) for r in summary["readers"]}
    assert len(readers) == 2 and all(pid != os.getpid() for _, pid in readers), readers
    assert not (tmp_path / "spark" / spread.PIECES).exists()


def test_a_bad_value_read_on_an_executor_is_the_local_ingestions_one_line(spark_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad_value_said_as_locally(
        tmp_path, lambda params, out: spark_ingest.ingest(params, out, cluster_env(spark_cluster))
    )


@pytest.mark.e2e
def test_snakemake_profile_spark_ingests_on_the_executors(spark_cluster, tmp_path):
    """The command the user types: `snakemake --profile spark` trains a run on a table whose ingest step reads the
    windows on the executors, before the workflow's own application for the training takes their cores; the
    partitions and manifest are those of `--profile local`'s data jobs."""
    table = parquet_folder(tmp_path / "table", the_rows())
    section = {"path": str(table), "features": tables.FEATURES, "label": "y"}
    data = {"source": "table", "num_train_files": 3, "num_classes": 1, "table": section}
    # The run trains one epoch on what the ingestion wrote, in batches of 4,096 rows: TINY's 32 made it 5,620 steps
    # and 1,875 of validation (test_databricks_ingest's run of the same table: a loop of 9.9 s, a validation of 2.9 s).
    # Two ranks, one a worker's core each: the workflow's shared application, had it started ahead of the data jobs,
    # would hold both, and the ingestion read the table alone after 30 s of waiting for an executor.
    launch = {**TINY["launch"], "devices": 2, "threads_per_process": 1}
    config = {
        **TINY,
        "trainer": {**TINY["trainer"], "max_epochs": 1, "batch_size": 4096},
        "data": data,
        "launch": launch,
    }
    for profile, until in (("spark", ()), ("local", ("--until", "data_manifest"))):
        (tmp_path / profile).mkdir()
        flow = Workflow(tmp_path / profile, profile=profile)
        flow.write_config(config)
        if profile == "spark":  # the run below is then its rerun
            killed_while_ingesting(flow, subprocess_env(**spark_cluster.env()))
        flow.run(*until, env=subprocess_env(**spark_cluster.env()))
    assert list((tmp_path / "spark" / "results" / "runs").glob("*/provenance.json"))
    [log] = (tmp_path / "spark" / "logs" / "data").glob("*/ingest.log")
    assert "600,000 rows in 2 pieces, read by Spark tasks" in log.read_text()
    assert "Spark application app-" in log.read_text()
    # Only the ingestion's lines: no Spark banner ("Setting default log level to "WARN"", sc.setLogLevel's advice),
    # log4j's WARNs (NativeCodeLoader) or the JVM's note on the incubator module Spark's launcher adds.
    theirs = [line for line in log.read_text().splitlines() if not line.startswith(("ingest: ", "ingested "))]
    assert not theirs, log.read_text()
    [local_log] = (tmp_path / "local" / "logs" / "data").glob("*/ingest.log")
    assert "Spark" not in local_log.read_text()
    names = same_files(tmp_path / "local" / "results" / "data", tmp_path / "spark" / "results" / "data")
    assert sum(name.endswith(".safetensors") for name in names) == 4 and any("manifest-" in n for n in names)


def killed_while_ingesting(flow: Workflow, env: dict[str, str]) -> None:
    """`snakemake --profile spark` whose ingest step is killed outright (SIGKILL: nothing of it cleans up, as for a
    step killed by the OOM killer) once its pieces' folder is made, while its Spark application starts: Snakemake
    removes the failed job's outputs, and nothing of the ingestion is left in the dataset's folder (its pieces,
    and the application's scratch among them, were in train/)."""
    output = flow.directory / "killed.out"
    with output.open("w") as said:
        typed = subprocess.Popen(
            flow.command("--until", "data_table"), cwd=flow.directory, env=env, stdout=said, stderr=subprocess.STDOUT
        )
    try:
        ingest_step(flow.directory, typed, output).kill()
        assert typed.wait(timeout=300) != 0
    finally:
        typed.kill()
    text = output.read_text()
    assert "Removing output files of failed job data_table" in text, text[-3000:]
    # No job wrote anything else: Snakemake removes the folders it emptied, and results/ with them.
    assert not list((flow.directory / "results").rglob("*")), text[-3000:]


def ingest_step(directory: Path, typed: subprocess.Popen, output: Path) -> psutil.Process:
    """The workflow's ingest step once it has said how its table is read (its pieces' folder made first)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and typed.poll() is None:
        logs = list((directory / "logs" / "data").glob("*/ingest.log"))
        if logs and "read by Spark tasks" in logs[0].read_text():
            for process in psutil.process_iter(["cmdline", "cwd"]):
                command = process.info["cmdline"] or []
                if process.info["cwd"] == str(directory) and {"snakeddp.steps", "ingest"} <= set(command):
                    return process
        time.sleep(0.05)
    raise AssertionError(f"no ingest step reading on the executors: {output.read_text()[-3000:]}")


# Another application holding both workers' cores while it lives (as the workflow's shared application may
# for its training runs, which wait for the data): it says so once its executors are registered. Its JVMs start
# as the step's do (snakeddp.spark.session.jvm_start).
HOLD = """
import sys, time
from pyspark import SparkConf, SparkContext
settings = {"spark.master": sys.argv[1], "spark.cores.max": "2", "spark.ui.enabled": "false",
            "spark.driver.extraJavaOptions": sys.argv[2], "spark.executor.extraJavaOptions": sys.argv[2],
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s"}
context = SparkContext(conf=SparkConf().setAll(list(settings.items())))
print("holding", flush=True)
time.sleep(600)
"""


def test_a_cluster_whose_cores_are_all_held_leaves_the_table_to_the_step(spark_cluster, tmp_path, monkeypatch, capfd):
    table = parquet_folder(tmp_path / "table", the_rows())
    params = tables.params(table, partitions=3)
    ingest(params, tmp_path / "local")
    command = [sys.executable, "-c", HOLD, spark_cluster.master_url, jvm_start("")]
    holder = subprocess.Popen(command, env=cluster_env(spark_cluster), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "holding\n"
        monkeypatch.chdir(tmp_path)
        summary = spark_ingest.ingest(params, tmp_path / "spark", cluster_env(spark_cluster))
    finally:
        holder.terminate()
        holder.wait(timeout=60)
    assert "no free core on the Spark cluster" in capfd.readouterr().err
    assert "pieces" not in summary  # read by the step itself, as on the local platform
    assert len(same_files(tmp_path / "local", tmp_path / "spark")) == 2 * (3 + 1)


def test_a_local_master_leaves_the_table_to_the_step(tmp_path, monkeypatch, capfd):
    """local[N] runs its tasks in the driver's process, on this machine: the step reads the table itself."""
    table = parquet_folder(tmp_path / "table", the_rows())
    monkeypatch.chdir(tmp_path)
    env = {**subprocess_env(), "SNAKEDDP_PLATFORM": "spark", "SNAKEDDP_PLATFORM_SECTION": '{"master": "local[2]"}'}
    summary = spark_ingest.ingest(tables.params(table, partitions=3), tmp_path / "spark", env)
    said = capfd.readouterr().err
    # The pieces were said to be for Spark's tasks a line before: the step says it reads them itself instead.
    told = "local[2] runs Spark's tasks in the driver, on this machine, as this step would; the table is read here"
    assert f"{told} instead, not by Spark tasks" in said, said
    assert "pieces" not in summary and summary["rows_read"] == 600_000
