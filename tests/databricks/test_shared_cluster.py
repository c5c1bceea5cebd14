"""snakeddp.databricks.shared_cluster against the local stub, through databricks-sdk's own client: the
cluster is created once, sized for the largest run and set to terminate itself when idle; a train job
waits while it starts (PENDING, then RUNNING), starts it again after its idle termination, and stops in
one line when it failed to start; terminating it is one clusters/delete. Which invocations share one,
and a GPU run's checks on the shared cluster's spec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from databricks.sdk import WorkspaceClient

from snakeddp.config import validate
from snakeddp.databricks import DatabricksError, shared_cluster
from snakeddp.databricks.settings import Settings
from snakeddp.databricks.spec import DatabricksSpecError, JobPlan
from tests.databricks import test_submit
from tests.databricks.test_submit import TOKEN, user_env
from tests.databricks_server import DatabricksStub, Runner
from tests.helpers import TINY, Workflow

pytestmark = pytest.mark.dev_venv  # the databricks profile imports databricks-sdk

CPU = {"spark_version": "16.4.x-cpu-ml-scala2.12", "node_type_id": "Standard_D4ds_v5"}
GPU = {"spark_version": "16.4.x-gpu-ml-scala2.12", "node_type_id": "Standard_NC24ads_A100_v4"}


@pytest.fixture
def client(stub: DatabricksStub) -> WorkspaceClient:
    return WorkspaceClient(host=stub.url, token=TOKEN)


def plan(run_id: str, nodes: int = 1, gpu: bool = False, cluster: dict | None = None) -> JobPlan:
    return JobPlan(
        run_id=run_id, nodes=nodes, devices=2, gpu=gpu, stage="/Volumes/main/ml/snakeddp",
        manifest="results/data/d/manifest-3.json", code="code/x", timeout_s=600, new_cluster=cluster or CPU,
    )  # fmt: skip


def created(stub: DatabricksStub) -> list[dict]:
    return [json.loads(seen["body"]) for seen in stub.requests("POST", "/api/2.1/clusters/create")]


def test_created_once_for_the_largest_run_started_waited_for_and_terminated(stub, client):
    said: list[str] = []
    cluster_id = shared_cluster.create(client, [plan("a", nodes=1), plan("b", nodes=3)], "snakeddp: 2 runs")
    (body,) = created(stub)
    assert body["num_workers"] == 3 and body["spark_version"] == CPU["spark_version"]
    assert body["autotermination_minutes"] == shared_cluster.AUTOTERMINATION_MINUTES == 20
    assert body["cluster_name"] == "snakeddp: 2 runs" and body["custom_tags"] == {"snakeddp_shared_cluster": "true"}
    assert stub.clusters[cluster_id]["state"] == "PENDING", "created without waiting for its nodes"
    shared_cluster.ready(client, cluster_id, said.append)
    assert stub.clusters[cluster_id]["state"] == "RUNNING" and said == [
        f"waiting for the shared cluster {cluster_id} to start (PENDING)"
    ]
    shared_cluster.ready(client, cluster_id, said.append)
    assert len(said) == 1, "a running cluster is not waited for"
    shared_cluster.terminate(client, cluster_id)
    assert stub.clusters[cluster_id]["state"] == "TERMINATED"
    assert len(stub.requests("POST", "/api/2.1/clusters/delete")) == 1
    assert not stub.requests("POST", "/api/2.1/clusters/permanent-delete"), "terminated, its logs kept"


def test_a_cluster_its_idle_minutes_ended_is_started_again(stub, client):
    cluster_id = shared_cluster.create(client, [plan("a")], "snakeddp")
    stub.idle(cluster_id)
    said: list[str] = []
    shared_cluster.ready(client, cluster_id, said.append)
    assert stub.clusters[cluster_id]["state"] == "RUNNING"
    assert len(stub.requests("POST", "/api/2.1/clusters/start")) == 1
    assert "ended after 20 idle minutes; starting it" in said[0]


def test_a_cluster_that_did_not_start_is_one_line_and_never_started_again(stub, client):
    cluster_id = shared_cluster.create(client, [plan("a")], "snakeddp")
    stub.clusters[cluster_id].update(state="TERMINATED", state_message="Instance type not available",
                                     termination_reason={"code": "CLOUD_PROVIDER_LAUNCH_FAILURE"})  # fmt: skip
    with pytest.raises(DatabricksError) as raised:
        shared_cluster.ready(client, cluster_id, print)
    line = str(raised.value)
    assert len(line.splitlines()) == 1 and line.count("HINT:") == 1, line
    assert f"the shared cluster {cluster_id} is TERMINATED (CLOUD_PROVIDER_LAUNCH_FAILURE: Instance type" in line
    assert "databricks.share_cluster: false" in line
    assert not stub.requests("POST", "/api/2.1/clusters/start")


@pytest.mark.parametrize(
    ("section", "training", "shared"),
    [
        ({"share_cluster": "auto"}, 2, True),
        ({"share_cluster": "auto"}, 1, False),  # one run: its own job cluster, at job compute's rate
        ({"share_cluster": True}, 1, True),
        ({"share_cluster": False}, 12, False),
        ({"share_cluster": True}, 0, False),  # nothing trains: no cluster
        ({"share_cluster": True, "existing_cluster_id": "0101-x"}, 3, False),  # already one cluster
        ({"share_cluster": True, "submit": False}, 3, False),  # nothing is sent
    ],
)
def test_which_invocations_share_a_cluster(section, training, shared):
    settings = Settings.of(validate({"databricks": {"submit": True, **section}})["databricks"])
    assert shared_cluster.wanted(settings, training) is shared


def test_a_gpu_run_refuses_a_shared_cluster_of_a_cpu_runtime_and_takes_a_gpu_one(stub, client):
    with pytest.raises(DatabricksSpecError, match=r"run b trains on GPUs .* not a GPU ML runtime .*HINT: set"):
        shared_cluster.create(client, [plan("a"), plan("b", gpu=True)], "snakeddp")
    assert not created(stub), "nothing created for a cluster the GPU run could not use"
    gpu = [plan("a", cluster=GPU), plan("b", nodes=2, gpu=True, cluster=GPU)]
    shared_cluster.create(client, gpu, "snakeddp")
    (body,) = created(stub)
    assert body["num_workers"] == 2 and body["spark_conf"]["spark.task.resource.gpu.amount"] == "1"


# End to end: `snakemake --profile databricks` against the stub, each run's task trained by the test's driver
# (tests/databricks/test_submit.py's: the staged entry on a local Spark master, as the cluster's driver would).
# On TINY's data: test_submit's larger data times a driver lost mid-training there; here the runs need only finish
# (the file: 53 -> 44 s of wall, its CPU about the same).
SWEEP = {
    **test_submit.CONFIG,
    "data": TINY["data"],
    "trainer": {**TINY["trainer"], "max_epochs": 2},
    "sweep": {"seed": [1, 2, 3]},
}


def failing(run: str, inner: Runner) -> Runner:
    """The cluster's driver, except that ``run``'s task fails, as a run whose driver hit an error."""

    def driver(body: dict[str, Any], root: Path) -> tuple[str, str]:
        if test_submit.run_path(body["tasks"][0]["spark_python_task"]["parameters"]) == f"results/runs/{run}":
            return "FAILED", "test: the driver of this run failed"
        return inner(body, root)

    return driver


@pytest.mark.e2e
def test_a_sweep_shares_one_cluster_and_one_failed_run_leaves_the_others_and_no_cluster(tmp_path, stub):
    flow = Workflow(tmp_path / "flow", profile="databricks")
    flow.directory.mkdir()
    flow.write_config(SWEEP)
    stub.runner = failing("seed-2", test_submit.driver(test_submit.cluster_env()))
    done = flow.run(env=user_env(stub), check=False)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    (cluster_id,) = stub.clusters
    assert len(created(stub)) == 1
    submitted = [json.loads(seen["body"])["tasks"][0] for seen in stub.requests("POST", "/api/2.2/jobs/runs/submit")]
    assert len(submitted) == 3 and all(task["existing_cluster_id"] == cluster_id for task in submitted)
    assert not [task for task in submitted if "new_cluster" in task]
    assert {run["cluster_state_at_submit"] for run in stub.runs.values()} == {"RUNNING"}, "each waited for it"
    # The cluster terminated once, at the end, whatever the failed run did.
    assert len(stub.requests("POST", "/api/2.1/clusters/delete")) == 1
    assert stub.clusters[cluster_id]["state"] == "TERMINATED"
    assert f"terminated the shared cluster {cluster_id}" in said
    results = flow.directory / "results" / "runs"
    for run in ("seed-1", "seed-3"):
        log = flow.directory / "logs" / "train" / f"{run}.log"
        assert (results / run / "provenance.json").is_file(), log.read_text() + (stub.root / "driver.log").read_text()
        provenance = json.loads((results / run / "provenance.json").read_text())
        assert provenance["training"]["epochs_completed"] == 2 and (results / run / "finished.json").is_file()
        record = json.loads((results / run / "databricks" / "environment.json").read_text())
        assert record["cluster"] == {"kind": "shared", "id": cluster_id, "shared": True}
        submission = json.loads((results / run / "databricks" / "submission.json").read_text())
        assert submission["cluster_id"] == cluster_id and submission["shared_cluster"] == cluster_id
    assert not (results / "seed-2" / "provenance.json").exists()
    assert TOKEN not in said


@pytest.mark.e2e
def test_share_cluster_false_keeps_a_job_cluster_per_run(tmp_path, stub):
    flow = Workflow(tmp_path / "flow", profile="databricks")
    flow.directory.mkdir()
    flow.write_config({**SWEEP, "databricks": {**SWEEP["databricks"], "share_cluster": False}})
    stub.runner = lambda body, root: ("CANCELED", "Run cancelled by the test.")  # the requests are what is checked
    flow.run(env=user_env(stub), check=False)
    submitted = [json.loads(seen["body"])["tasks"][0] for seen in stub.requests("POST", "/api/2.2/jobs/runs/submit")]
    assert len(submitted) == 3 and all("existing_cluster_id" not in task for task in submitted)
    assert sorted(task["new_cluster"]["custom_tags"]["snakeddp_run"] for task in submitted) == [
        "seed-1", "seed-2", "seed-3"
    ]  # fmt: skip
    assert not stub.clusters and not stub.requests("POST", "/api/2.1/clusters/delete")
