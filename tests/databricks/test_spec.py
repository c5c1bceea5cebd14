"""snakeddp.databricks.spec: a run's one-time Jobs run, built from databricks-sdk's own classes, checked
for what they do not check, and sent by the SDK's own ``jobs.submit`` to a local HTTP stub that records
the request (no Databricks workspace is reachable here)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.service import jobs

from snakeddp import config
from snakeddp.config.parts import Launch
from snakeddp.contract import PreflightError
from snakeddp.databricks.platform import check_requests as check_databricks
from snakeddp.databricks.settings import Settings
from snakeddp.databricks.spec import (
    DatabricksSpecError,
    JobPlan,
    as_json,
    check,
    plan_for,
    submit_request,
    write_request,
)
from tests.platforms.invocations import invocation

STAGE = "/Volumes/main/ml/snakeddp"
GPU_CLUSTER = {"spark_version": "16.4.x-gpu-ml-scala2.12", "node_type_id": "Standard_NC24ads_A100_v4"}
TOKEN = "dapi-0123456789abcdef-test-token"


def plan(**overrides) -> JobPlan:
    given = dict(
        run_id="devices-2",
        nodes=2,
        devices=1,
        gpu=False,
        stage=STAGE,
        manifest="results/data/synthetic-5bf3b09875/manifest-4.json",
        code="code/5f1e0c",
        timeout_s=1800,
        new_cluster={"spark_version": "16.4.x-cpu-ml-scala2.12", "node_type_id": "Standard_D4ds_v5"},
        variables={"NCCL_DEBUG": "WARN"},
    )
    return JobPlan(**{**given, **overrides})


def test_a_new_cluster_gets_one_worker_per_node_and_the_entry_runs_launch_on_the_spark_platform():
    request = submit_request(plan())
    body = as_json(request)
    (task,) = body["tasks"]
    assert task["task_key"] == "train" and task["timeout_seconds"] == body["timeout_seconds"] == 1800
    assert task["new_cluster"]["num_workers"] == 2 and task["new_cluster"]["node_type_id"] == "Standard_D4ds_v5"
    assert task["new_cluster"]["spark_conf"]["spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures"] == "5"
    assert "spark.task.resource.gpu.amount" not in task["new_cluster"]["spark_conf"]
    python = task["spark_python_task"]
    assert python["python_file"] == f"{STAGE}/code/5f1e0c/snakeddp/remote/entry.py"
    argv = python["parameters"]
    assert argv[2:] == [
        "--workdir", STAGE, "launch", "--", "--platform", "spark", "--config", "results/runs/devices-2/run.yaml",
        "--run-dir", "results/runs/devices-2", "--data", "results/data/synthetic-5bf3b09875/manifest-4.json",
        "--environment-record", "results/runs/devices-2/environment.json",
    ]  # fmt: skip
    assert json.loads(argv[1]) == {"NCCL_DEBUG": "WARN"}
    # The SDK's classes read their own output back unchanged.
    assert jobs.SubmitTask.from_dict(task).as_dict() == task


def test_gpus_take_one_each_and_an_existing_cluster_is_named_instead_of_a_new_one():
    gpu = as_json(submit_request(plan(gpu=True, devices=4, new_cluster=GPU_CLUSTER)))["tasks"][0]
    assert gpu["new_cluster"]["spark_conf"]["spark.task.resource.gpu.amount"] == "1"
    existing = as_json(submit_request(plan(existing_cluster_id="0123-456789-abcdef", new_cluster={})))["tasks"][0]
    assert existing["existing_cluster_id"] == "0123-456789-abcdef" and "new_cluster" not in existing


def test_a_gpu_run_on_a_cpu_runtime_is_refused_in_one_line_and_its_hint_works():
    cpu_runtime = {**GPU_CLUSTER, "spark_version": "16.4.x-cpu-ml-scala2.13"}
    with pytest.raises(DatabricksSpecError) as refused:
        submit_request(plan(gpu=True, new_cluster=cpu_runtime))
    (line,) = str(refused.value).splitlines()
    assert "16.4.x-cpu-ml-scala2.13 is not a GPU ML runtime" in line
    # The HINT names the GPU form of the same release; set, the request is built.
    assert (
        line.count("HINT:") == 1 and "HINT: set databricks.new_cluster.spark_version: 16.4.x-gpu-ml-scala2.13" in line
    )
    submit_request(plan(gpu=True, new_cluster={**cpu_runtime, "spark_version": "16.4.x-gpu-ml-scala2.13"}))

    # A CPU run on the same cluster is not a GPU run's business; nodes' GPUs, and an existing cluster, are the
    # workspace's to say (tests/databricks/test_nodes.py).
    submit_request(plan(gpu=False))
    submit_request(plan(gpu=True, existing_cluster_id="0123-456789-abcdef", new_cluster={}))


def test_preflight_checks_each_runs_cluster_with_the_accelerator_the_job_will_resolve():
    """launch.accelerator gpu, or auto on a profile whose site declares gpu: refused before any job."""
    section = {"stage": STAGE, "new_cluster": {"spark_version": "16.4.x-cpu-ml-scala2.12", "node_type_id": "g5.xlarge"}}
    for launch, site in (({"accelerator": "gpu"}, {}), ({"accelerator": "auto"}, {"accelerator": "gpu"})):
        cfg = config.validate({"launch": launch, "site": site, "databricks": section})
        with pytest.raises(PreflightError, match=r"^run base trains on GPUs .*not a GPU ML runtime.*HINT:"):
            check_databricks(invocation(cfg, {"base": {"config": cfg}}, "databricks"), {"base": {"config": cfg}})
    cpu = config.validate({"launch": {"accelerator": "auto"}, "site": {"accelerator": "cpu"}, "databricks": section})
    check_databricks(invocation(cpu, {"base": {"config": cpu}}, "databricks"), {"base": {"config": cpu}})
    fixed = {**section, "new_cluster": {**section["new_cluster"], "spark_version": "16.4.x-gpu-ml-scala2.12"}}
    gpu = config.validate({"launch": {"accelerator": "gpu"}, "databricks": fixed})
    check_databricks(invocation(gpu, {"base": {"config": gpu}}, "databricks"), {"base": {"config": gpu}})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"new_cluster": {"node_type_id": "Standard_D4ds_v5"}}, "databricks.new_cluster.spark_version is not set"),
        (
            {"new_cluster": {"spark_version": "16.4.x-cpu-ml-scala2.12"}},
            "databricks.new_cluster.node_type_id is not set",
        ),
        ({"new_cluster": {}}, "databricks.new_cluster.spark_version is not set"),
        ({"timeout_s": 0}, "the run has no timeout"),
    ],
)
def test_what_the_sdks_classes_let_through_and_the_jobs_api_refuses_is_one_line_with_a_hint(overrides, message):
    with pytest.raises(DatabricksSpecError) as refused:
        submit_request(plan(**overrides))
    (line,) = str(refused.value).splitlines()
    assert message in line and "HINT:" in line


def test_from_dict_validates_nothing_so_check_does():
    """The premise: the SDK builds a task with no cluster and no file without a word."""
    bare = jobs.SubmitTask.from_dict({"task_key": "train"})
    assert bare.spark_python_task is None and bare.new_cluster is None and bare.existing_cluster_id is None
    with pytest.raises(DatabricksSpecError, match="no python_file"):
        check({"tasks": [bare], "timeout_seconds": 60})
    bare.spark_python_task = jobs.SparkPythonTask(python_file="/Volumes/x/entry.py")
    with pytest.raises(DatabricksSpecError, match="existing cluster or a new one"):
        check({"tasks": [bare], "timeout_seconds": 60})


class Recorder(BaseHTTPRequestHandler):
    """The Jobs API's runs/submit as a local stub: records each request, answers with a run id."""

    seen: list[dict] = []

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        self.seen.append(
            {"path": self.path, "headers": dict(self.headers), "body": json.loads(self.rfile.read(length) or b"{}")}
        )
        answer = json.dumps({"run_id": 4242}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self):
        self.seen.append({"path": self.path, "headers": dict(self.headers), "body": None})
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_sdks_own_submit_sends_the_spec_as_built_with_the_token_from_its_chain(stub, monkeypatch):
    monkeypatch.setenv("DATABRICKS_HOST", stub)
    monkeypatch.setenv("DATABRICKS_TOKEN", TOKEN)
    request = submit_request(plan())
    waiter = WorkspaceClient().jobs.submit(**request)
    assert waiter.run_id == 4242
    (sent,) = [seen for seen in Recorder.seen if seen["path"] == "/api/2.2/jobs/runs/submit"]
    assert sent["body"] == as_json(request)
    assert sent["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in json.dumps(as_json(request)), "credentials come from the SDK's chain, never the spec"


def test_a_runs_config_and_the_section_make_the_plan_and_the_written_request_reads_back(tmp_path):
    cfg = config.validate(
        {
            "launch": {"nodes": 2, "devices": 4, "runtime": 45},
            "databricks": {"stage": f"{STAGE}/", "new_cluster": {"spark_version": "16.4.x-gpu-ml-scala2.12",
                                                                  "node_type_id": "Standard_NC24ads_A100_v4"}},
        }
    )  # fmt: skip
    launch, settings = Launch.of(cfg["launch"]), Settings.of(cfg["databricks"])
    made = plan_for(
        "base", launch, settings, "data/d-0123456789/manifest-4.json", code="code/0a", gpu=True, variables={}
    )
    assert (made.world_size, made.timeout_s, made.stage, made.gpu) == (8, 2700, STAGE, True)
    written = tmp_path / "submit.json"
    assert not write_request(submit_request(made), written), "nothing secret to mask"
    body = json.loads(written.read_text())
    (task,) = body["tasks"]
    check({"tasks": [jobs.SubmitTask.from_dict(task)], "timeout_seconds": body["timeout_seconds"]})
    assert task["new_cluster"]["num_workers"] == 2 and body["run_name"] == "snakeddp base"
    with pytest.raises(DatabricksSpecError, match=r"databricks.stage is not set.*HINT: set it to a Unity Catalog"):
        plan_for("base", launch, replace(settings, stage=None), "m.json", code="code/0a", gpu=False, variables={})
