"""Ingestion on the databricks platform's cluster (snakeddp.databricks.ingest) with the task's command run on the
real 2-worker standalone Spark cluster, as a Databricks cluster's driver runs it: the ingest step submits a
one-time Jobs run through databricks-sdk's own client to the local workspace stub (tests/databricks_server.py,
which judges the request by the SDK's own definitions and keeps the volume's files in a folder, as a cluster's
mount shows them), the stub hands the task to that driver, whose Spark tasks read the Delta table's windows on
the executors, and the step copies the output back: the partitions, entries and validation set are a local
ingestion's, byte for byte, here and on the volume where the train jobs' staging finds them."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from snakeddp.data.partitions import verify_file
from snakeddp.data.table import WRITTEN
from snakeddp.data.table import ingest as local_ingest
from snakeddp.databricks import DatabricksError
from snakeddp.databricks import ingest as databricks_ingest
from snakeddp.run import variables
from tests import tables
from tests.databricks_server import JOBS, DatabricksStub
from tests.helpers import TINY, Workflow, subprocess_env
from tests.spread_tables import bad_value_table, delta_table, same_files, the_rows

pytestmark = pytest.mark.dev_venv  # pyspark and databricks-sdk

STAGE = "/Volumes/main/ml/snakeddp"
TOKEN = "dapi-ingest-7d2e-stub-token"
CLUSTER = {"spark_version": "16.4.x-cpu-ml-scala2.12", "node_type_id": "Standard_D4ds_v5"}
OUT = "results/data/t-0123456789"
WORKLOAD_FAILED = "Workload failed, see run output for details"
# runs/get answers once the run ends (within this): the SDK's waiter would see each run end up to 10 s late.
GETS_HELD_S = 15.0


def driver_env(cluster) -> dict[str, str]:
    """The cluster's driver: its Spark master (spark-defaults.conf), no workspace credentials, nothing of the
    workflow's exported variables but what the task's --variables bring."""
    env = subprocess_env(**cluster.env())
    return {k: v for k, v in env.items() if not k.startswith(("DATABRICKS_", "SNAKEDDP_"))}


def driver(env: dict[str, str], ran: dict[str, Any]):
    """What the cluster's driver does with the submitted task: its python_file with its parameters, the volume's
    paths through the mount (the stub's folder)."""

    def run(body: dict[str, Any], root: Path) -> tuple[str, str]:
        task = body["tasks"][0]["spark_python_task"]

        def mount(value: str) -> str:
            return str(root / value.lstrip("/")) if value.startswith("/Volumes/") else value

        argv = [sys.executable, mount(task["python_file"]), *map(mount, task["parameters"])]
        with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as started:
            ran["pid"] = started.pid
            ran["log"] = started.communicate(timeout=600)[0]
        # As a workspace says it of a Python task that exited with an error; its output holds the task's own words.
        return ("SUCCESS", "") if started.returncode == 0 else ("FAILED", WORKLOAD_FAILED, ran["log"])

    return run


def test_the_tasks_command_on_a_spark_cluster_gives_a_local_ingestions_partitions(
    spark_cluster, tmp_path, monkeypatch, capfd
):
    table = delta_table(tmp_path / "table", the_rows())
    params = tables.params(table, partitions=3)
    local_ingest(params, tmp_path / "local")
    flow, ran = tmp_path / "flow", {}
    flow.mkdir()
    monkeypatch.chdir(flow)
    monkeypatch.setenv("HOME", str(flow))  # no ~/.databrickscfg of this machine's
    monkeypatch.setenv("DATABRICKS_TOKEN", TOKEN)
    stub = DatabricksStub(tmp_path / "workspace", TOKEN, runner=driver(driver_env(spark_cluster), ran))
    stub.gets_held_s = GETS_HELD_S
    try:
        monkeypatch.setenv("DATABRICKS_HOST", stub.url)
        env = {variables.PLATFORM_SECTION: json.dumps({"stage": STAGE, "new_cluster": CLUSTER})}
        summary = databricks_ingest.ingest(params, Path(OUT), env)
    finally:
        stub.close()

    assert len(same_files(tmp_path / "local", flow / OUT)) == 2 * (3 + 1), ran.get("log")
    # On the volume too, below the stage as the step's output is below the workflow's directory.
    assert len(same_files(tmp_path / "local", stub.local(f"{STAGE}/{OUT}"))) == 2 * (3 + 1)
    assert summary["pieces"] == 2 and summary["delta"]["version"] == 1
    # Read by the executors' Python workers, one per worker: neither the driver nor this process.
    readers = {tuple(r) for r in summary["readers"]}
    assert len(readers) == 2 and not {pid for _, pid in readers} & {os.getpid(), ran["pid"]}, readers
    assert "2 tasks on up to 2 cores" in ran["log"]  # the driver's line: the windows went to Spark tasks

    [sent] = stub.requests("POST", f"{JOBS}/submit")
    task = json.loads(sent["body"])["tasks"][0]
    assert task["new_cluster"]["num_workers"] == 2  # one per window
    python = task["spark_python_task"]
    said = capfd.readouterr().err
    command = next(line for line in said.splitlines() if "read on the Databricks cluster by: " in line)
    assert shlex.split(command.split(" by: ", 1)[1]) == ["python", python["python_file"], *python["parameters"]]
    assert json.loads(python["parameters"][python["parameters"].index("--params") + 1]) == params

    # The cluster's stat stamps stayed there: here every file is hashed by what reads it, against its entry.
    assert not (flow / OUT / WRITTEN).exists()
    for name in ("train/part-00000", "train/part-00001", "train/part-00002", "val"):
        verify_file(flow / OUT / f"{name}.safetensors", json.loads((flow / OUT / f"{name}.json").read_text()))


def test_a_bad_value_read_on_an_executor_is_the_local_ingestions_one_line(spark_cluster, tmp_path, monkeypatch):
    """A NaN in the third file, read by a Spark task on the cluster: the step stops with the line a local ingestion
    stops with (the task's, from its output), and nothing is copied back."""
    params, local = bad_value_table(tmp_path)
    (tmp_path / "flow").mkdir()
    monkeypatch.chdir(tmp_path / "flow")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DATABRICKS_TOKEN", TOKEN)
    ran: dict[str, Any] = {}
    stub = DatabricksStub(tmp_path / "workspace", TOKEN, runner=driver(driver_env(spark_cluster), ran))
    stub.gets_held_s = GETS_HELD_S
    try:
        monkeypatch.setenv("DATABRICKS_HOST", stub.url)
        env = {variables.PLATFORM_SECTION: json.dumps({"stage": STAGE, "new_cluster": CLUSTER})}
        with pytest.raises(DatabricksError) as failed:
            databricks_ingest.ingest(params, Path(OUT), env)
    finally:
        stub.close()
    assert str(failed.value) == str(local.value), ran.get("log")
    assert "part-2.parquet: column 'b', row 124: missing or non-finite value. HINT:" in str(local.value)
    assert "2 tasks on up to 2 cores" in ran["log"]  # read on the executors
    assert not list(tmp_path.rglob("*.safetensors"))  # on the volume neither: the ingestion removed what it published


def workflow_driver(cluster, ran: dict[str, Any]):
    """The cluster's driver for every task of a workflow: the ingestion's on the Spark cluster, a run's training
    on a local[2] master (as tests/databricks/test_submit.py's driver)."""
    ingests = driver(driver_env(cluster), ran)
    trains = driver({**driver_env(cluster), "MASTER": "local[2]"}, {})

    def run(body: dict[str, Any], root: Path) -> tuple[str, str]:
        return (ingests if body["tasks"][0]["task_key"] == "ingest" else trains)(body, root)

    return run


@pytest.mark.e2e
def test_snakemake_profile_databricks_ingests_on_the_cluster_and_trains_on_what_it_wrote(spark_cluster, tmp_path):
    """The command the user types: `snakemake --profile databricks` ingests the Delta table by a Jobs run on the
    cluster, then trains the run there: the partitions and manifest are `--profile local`'s data jobs', and the
    train job's staging finds the partitions on the volume where the ingestion wrote them (it uploads none)."""
    table = delta_table(tmp_path / "table", the_rows())
    section = {"path": str(table), "features": tables.FEATURES, "label": "y"}
    data = {"source": "table", "num_train_files": 3, "num_classes": 1, "table": section}
    # The run trains one epoch on what the ingestion wrote, in batches of 4,096 rows: TINY's 32 made it 5,620 steps
    # and 1,875 of validation (the train task's loop 9.9 s, its validation 2.9 s, on this machine's 2 cores).
    config = {**TINY, "trainer": {**TINY["trainer"], "max_epochs": 1, "batch_size": 4096}, "data": data}
    ran: dict[str, Any] = {}
    stub = DatabricksStub(tmp_path / "workspace", TOKEN, runner=workflow_driver(spark_cluster, ran))
    stub.gets_held_s = GETS_HELD_S
    try:
        for profile, until, more in (
            ("databricks", (), {"databricks": {"stage": STAGE, "new_cluster": CLUSTER}}),
            ("local", ("--until", "data_manifest"), {}),
        ):
            flow = Workflow(tmp_path / profile, profile=profile)
            flow.directory.mkdir()
            flow.write_config({**config, **more})
            env = subprocess_env(DATABRICKS_HOST=stub.url, DATABRICKS_TOKEN=TOKEN, HOME=str(flow.directory))
            flow.run(*until, env=env)
    finally:
        stub.close()
    assert [json.loads(s["body"])["tasks"][0]["task_key"] for s in stub.requests("POST", f"{JOBS}/submit")] == [
        "ingest",
        "train",
    ]
    assert list((tmp_path / "databricks" / "results" / "runs").glob("*/provenance.json"))
    [log] = (tmp_path / "databricks" / "logs" / "data").glob("*/ingest.log")
    assert f"ingest: 2 windows read on the Databricks cluster by: python {STAGE}/code/" in log.read_text()
    assert "2 tasks on up to 2 cores" in ran["log"]  # the ingestion's driver: the windows went to Spark tasks
    names = same_files(tmp_path / "local" / "results" / "data", tmp_path / "databricks" / "results" / "data")
    assert sum(name.endswith(".safetensors") for name in names) == 4 and any("manifest-" in n for n in names)
    # The train job's staging found the partitions on the volume, where the ingestion wrote them: it sent the manifest.
    uploaded = [seen["path"] for seen in stub.requests("PUT", f"/api/2.0/fs/files{STAGE}/results/data/")]
    assert uploaded and all("/manifest-" in path for path in uploaded), uploaded
