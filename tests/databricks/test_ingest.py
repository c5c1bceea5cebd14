"""snakeddp.databricks.ingest: the one-time Jobs run that ingests a table on the Databricks cluster, its request
built from databricks-sdk's own classes and judged by the SDK's own definitions of jobs.submit; what the step reads
itself; a run that fails, submitted by the SDK's client to the local workspace stub (tests/databricks_server.py),
and a copy back that stops.
The task's command run on a real Spark cluster, against a local ingestion: tests/spark/test_databricks_ingest.py."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from databricks.sdk.service import jobs

from snakeddp import platforms
from snakeddp.data.table import ingest as local_ingest
from snakeddp.databricks import DatabricksError
from snakeddp.databricks import ingest as databricks_ingest
from snakeddp.databricks.settings import Settings
from snakeddp.databricks.spec import DatabricksSpecError, as_json
from snakeddp.remote.folder import ENTRY
from snakeddp.run import variables
from tests import tables
from tests.databricks_server import JOBS, malformed_request
from tests.spread_tables import parquet_folder, same_files, the_rows

pytestmark = pytest.mark.dev_venv  # databricks-sdk

STAGE = "/Volumes/main/ml/snakeddp"
TOKEN = "dapi-ingest-0a1b2c-stub-token"
CLUSTER = {"spark_version": "16.4.x-cpu-ml-scala2.12", "node_type_id": "Standard_D4ds_v5"}
OUT = "results/data/t-5bf3b09875"


def settings(**section) -> Settings:
    return Settings.of(
        variables.platform_section(
            {variables.PLATFORM_SECTION: json.dumps({"stage": STAGE, "new_cluster": CLUSTER, **section})}, "databricks"
        )
    )


def request_for(path: str, pieces: int = 3, shared: str | None = None, **section) -> dict:
    plan = databricks_ingest.plan_of(settings(**section), "code/5f1e0c", pieces, shared)
    params = tables.params(Path(path), partitions=3)
    return databricks_ingest.ingest_request(plan, params, OUT, {variables.PLATFORM: "ranks-as", "X": "1"})


def test_the_registry_says_databricks_ingests_on_its_cluster():
    assert platforms.ingester("databricks") is databricks_ingest.ingest


def test_the_request_runs_the_ingest_step_through_the_entry_and_the_sdk_takes_it():
    # A Lakehouse path with a space and a quote: the task's argv carries it as one value, the log's line quotes it.
    request = request_for("/Volumes/main/ml/it's a table")
    body = as_json(request)
    assert malformed_request(body, jobs.JobsAPI.submit) is None  # the SDK's own definition of jobs/runs/submit
    (task,) = body["tasks"]
    assert jobs.SubmitTask.from_dict(task).as_dict() == task  # the SDK reads its own output back unchanged
    assert task["task_key"] == "ingest" and body["timeout_seconds"] == databricks_ingest.TIMEOUT_S
    assert task["new_cluster"]["num_workers"] == 3 and task["new_cluster"]["node_type_id"] == "Standard_D4ds_v5"
    python = task["spark_python_task"]
    assert python["python_file"] == f"{STAGE}/code/5f1e0c/{ENTRY}"
    argv = python["parameters"]
    assert argv[2:8] == ["--workdir", STAGE, "steps", "--", "ingest", "--params"] and argv[9:] == ["--out", OUT]
    assert json.loads(argv[1]) == {variables.PLATFORM: "ranks-as", "X": "1"}
    assert json.loads(argv[8])["table"]["path"] == "/Volumes/main/ml/it's a table"
    line = databricks_ingest.command_line(request)
    assert shlex.split(line) == ["python", python["python_file"], *argv]


def test_a_shared_or_existing_cluster_is_named_instead_of_a_new_one_and_a_big_table_takes_at_most_8_workers():
    assert as_json(request_for("/t", pieces=40))["tasks"][0]["new_cluster"]["num_workers"] == 8
    shared = as_json(request_for("/t", shared="0101-shared"))["tasks"][0]
    assert shared["existing_cluster_id"] == "0101-shared" and "new_cluster" not in shared
    existing = as_json(request_for("/t", existing_cluster_id="0202-mine"))["tasks"][0]
    assert existing["existing_cluster_id"] == "0202-mine"


def test_a_new_cluster_without_a_runtime_is_refused_as_a_runs_is():
    with pytest.raises(DatabricksSpecError, match=r"databricks.new_cluster.spark_version is not set.*HINT:"):
        request_for("/t", new_cluster={"node_type_id": "Standard_D4ds_v5"})


@pytest.mark.parametrize(
    ("section", "relative", "said"),
    [
        ({}, True, "data.table.path table is relative to this checkout, which the Databricks cluster does not have"),
        ({"submit": False}, False, "databricks.submit is false, so no run is submitted"),
    ],
)
def test_a_table_the_cluster_cannot_read_or_a_run_not_to_send_is_read_here(
    tmp_path, monkeypatch, capfd, section, relative, said
):
    table = parquet_folder(tmp_path / "table", the_rows())
    local_ingest(tables.params(table), tmp_path / "local")
    monkeypatch.chdir(tmp_path)
    params = tables.params(Path("table") if relative else table)
    env = {variables.PLATFORM_SECTION: json.dumps({"stage": STAGE, "new_cluster": CLUSTER, **section})}
    summary = databricks_ingest.ingest(params, Path(OUT), env)  # no workspace: nothing is asked of one
    assert f"ingest: {said}; the table is read here" in capfd.readouterr().err
    assert summary["split"]["windows"] == 2 and "pieces" not in summary
    assert len(same_files(tmp_path / "local", tmp_path / OUT)) == 2 * (3 + 1)


# What a workspace says of a Python task that exited with an error; the task's own words are in its output.
WORKLOAD_FAILED = "Workload failed, see run output for details"


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (
            "ingest: 600,000 rows in 2 pieces\nsnakeddp.steps: the table's bad value. HINT: clean it.\n",
            "the table's bad value. HINT: clean it.",
        ),
        ("Traceback (most recent call last):\nMemoryError\n", None),
    ],
    ids=["its-line", "no-line"],
)
def test_a_run_that_fails_is_one_line_and_leaves_no_partition(tmp_path, monkeypatch, capfd, stub, output, line):
    """Submitted by the SDK's client to the stub, whose cluster fails the task: the ingest step's own line where its
    output (runs/get-output) ends with one, else the run's state message, its page and a HINT."""
    table = parquet_folder(tmp_path / "table", the_rows())
    stub.runner = lambda body, root: ("FAILED", WORKLOAD_FAILED, output)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DATABRICKS_HOST", stub.url)
    monkeypatch.setenv("DATABRICKS_TOKEN", TOKEN)
    env = {variables.PLATFORM_SECTION: json.dumps({"stage": STAGE, "new_cluster": CLUSTER})}
    with pytest.raises(DatabricksError) as failed:
        databricks_ingest.ingest(tables.params(table), Path(OUT), env)
    said, err = str(failed.value), capfd.readouterr().err
    page = f"(its page: {stub.url}/#job/runs/1000)"
    if line is not None:
        assert said == line
        assert f"ingest: Databricks run 1000 ended FAILED {page}; the ingest step there said:" in err
    else:
        assert said.startswith(f"Databricks run 1000 that ingests the table ended FAILED: {WORKLOAD_FAILED} {page}")
        assert said.count("HINT:") == 1 and "\n" not in said
    [sent] = stub.requests("POST", f"{JOBS}/submit")
    python_file = json.loads(sent["body"])["tasks"][0]["spark_python_task"]["python_file"]
    assert stub.local(python_file).is_file()  # the code was staged where the task runs it from
    assert "ingest: 2 windows read on the Databricks cluster by: python /Volumes/" in err
    assert not list((tmp_path / "results").rglob("*.safetensors"))


def test_an_output_outside_the_workflows_directory_is_refused_and_from_there_it_has_its_place(tmp_path, monkeypatch):
    flow = tmp_path / "flow"
    (flow / "results").mkdir(parents=True)
    monkeypatch.chdir(flow / "results")
    with pytest.raises(DatabricksError, match=r"is outside the workflow's directory .* HINT: run the step from"):
        databricks_ingest.remote_out(flow / "results" / ".." / ".." / "elsewhere")
    monkeypatch.chdir(flow)  # as the HINT says: from the workflow's directory
    assert databricks_ingest.remote_out(flow / OUT) == OUT
    assert databricks_ingest.remote_out(Path(OUT)) == OUT


def test_a_run_that_succeeded_without_writing_the_partitions_is_refused_and_nothing_is_copied(
    tmp_path, monkeypatch, stub
):
    table = parquet_folder(tmp_path / "table", the_rows())
    stub.runner = lambda body, root: ("SUCCESS", "")  # a task that wrote nothing
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DATABRICKS_HOST", stub.url)
    monkeypatch.setenv("DATABRICKS_TOKEN", TOKEN)
    env = {variables.PLATFORM_SECTION: json.dumps({"stage": STAGE, "new_cluster": CLUSTER})}
    with pytest.raises(DatabricksError, match=rf"succeeded, but {STAGE}/{OUT}/train/part-00000.safetensors is not"):
        databricks_ingest.ingest(tables.params(table), Path(OUT), env)
    assert not (tmp_path / OUT).exists()


def test_a_copy_back_cut_short_leaves_nothing_beside_the_rules_outputs(tmp_path, monkeypatch, stub):
    """The run succeeded, and the connection drops while validation's partition comes back: the step stops in one
    line, and its partial file is not left beside data_table's outputs (Snakemake removes train/ and those)."""
    table = parquet_folder(tmp_path / "table", the_rows())
    params = tables.params(table)
    stub.runner = lambda body, root: (local_ingest(params, stub.local(f"{STAGE}/{OUT}")), ("SUCCESS", ""))[1]
    served = stub.files

    def cut_short(request, method, remote, body):
        if method != "GET" or not remote.endswith("/val.safetensors"):
            return served(request, method, remote, body)
        data = stub.local(remote).read_bytes()
        request.send_response(200)
        request.send_header("Content-Type", "application/octet-stream")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data[: len(data) // 2])  # then the connection closes

    stub.files = cut_short
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DATABRICKS_HOST", stub.url)
    monkeypatch.setenv("DATABRICKS_TOKEN", TOKEN)
    env = {variables.PLATFORM_SECTION: json.dumps({"stage": STAGE, "new_cluster": CLUSTER})}
    with pytest.raises(DatabricksError, match=rf"copying {STAGE}/{OUT}/val.safetensors back") as failed:
        databricks_ingest.ingest(params, Path(OUT), env)
    assert "\n" not in str(failed.value) and str(failed.value).count("HINT:") == 1
    assert sorted(os.listdir(tmp_path / OUT)) == ["train"]  # the train partitions came back before it
    assert not [name for name in os.listdir(tmp_path / OUT / "train") if name.endswith(".partial")]


def test_the_ingest_job_carries_no_tracking_section():
    """Ingestion logs to no tracker, and its request is sent before the train jobs' checks: a tracking URI's
    credentials (refused for a train job: workflow.preflight) never reach the ingest job's parameters."""
    tracking = json.dumps({"mlflow": {"enabled": True, "tracking_uri": "https://ann:Ann5ecretPw@mlflow.example"}})
    sent = databricks_ingest.job_variables({variables.TRACKING: tracking, variables.SITE: "{}"})
    assert variables.TRACKING not in sent and sent[variables.SITE] == "{}", sent
    assert "Ann5ecretPw" not in json.dumps(sent)
