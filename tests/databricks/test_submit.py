"""`snakemake --profile databricks` end to end against a local HTTP server that speaks the part of
Databricks' REST API snakeddp uses (tests/databricks_server.py): databricks-sdk's own client stages,
submits, polls and copies back; the server records what it sent, and runs the submitted task the
way the job cluster's driver would (the staged entry, its paths through the volume's mount, on a
local Spark master). No Databricks workspace is reachable from here."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from databricks.sdk import WorkspaceClient

from snakeddp import config
from snakeddp.run import tries, variables
from snakeddp.util.redact import scrub
from tests.databricks.submission import prepare
from tests.databricks_server import DatabricksStub
from tests.helpers import (
    CLUSTER_CONF_SECRETS,
    SPARK_CONF_SECRETS,
    STORAGE_KEY_VALUES,
    TINY,
    Workflow,
    leaked,
    subprocess_env,
)
from tests.platforms.conformance import Conformance, Finished

pytestmark = [pytest.mark.e2e, pytest.mark.dev_venv]  # the databricks profile imports databricks-sdk

STAGE = "/Volumes/main/ml/snakeddp"
TOKEN = "dapi-5e1c7a-stub-token-0f3b"
# Storage keys in the cluster's Spark settings (they reach the workspace in the request, and nothing
# snakeddp writes or prints) and in the spark section, which only the spark profile uses.
CLUSTER = {"spark_version": "16.4.x-cpu-ml-scala2.12", "node_type_id": "Standard_D4ds_v5",
           "spark_conf": CLUSTER_CONF_SECRETS}  # fmt: skip
CONFIG = {
    **TINY,
    # Epochs of about 0.2 s: a driver lost once the first last.ckpt is on the volume is lost mid-training.
    "data": {**TINY["data"], "num_records_per_train_file": 3000},
    "trainer": {**TINY["trainer"], "max_epochs": 6},
    "sweep": {"launch.devices": [2]},
    "databricks": {"stage": STAGE, "new_cluster": CLUSTER},
    "spark": {"conf": SPARK_CONF_SECRETS},
}


def driver(env: dict[str, str], lost_after: str | None = None):
    """What the job cluster's driver does with the submitted task: run its python_file with its
    parameters, the volume's paths through the mount (the stub's folder). ``lost_after``: a file below
    the run's folder on the volume (checkpoints/last.ckpt); once it is there, the driver and everything
    it started are killed, as a cluster that loses its driver mid-training ends the run."""

    def run(body: dict[str, Any], root: Path) -> tuple[str, str]:
        task = body["tasks"][0]["spark_python_task"]

        def mount(value: str) -> str:
            return str(root / value.lstrip("/")) if value.startswith(("/Volumes/", "/Workspace/")) else value

        argv = [sys.executable, mount(task["python_file"]), *map(mount, task["parameters"])]
        if lost_after is not None:
            watched = root / STAGE.lstrip("/") / run_path(task["parameters"]) / lost_after
            return lose_driver(argv, env, watched)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        Path(root / "driver.log").write_text(done.stdout + done.stderr)
        lines = done.stderr.strip().splitlines()
        return ("SUCCESS", "") if done.returncode == 0 else ("FAILED", lines[-1] if lines else "exit 1")

    return run


def run_path(parameters: list[str]) -> str:
    return parameters[parameters.index("--run-dir") + 1]


def lose_driver(argv: list[str], env: dict[str, str], watched: Path) -> tuple[str, str]:
    """Run the driver until ``watched`` exists, then kill it and every process under it at once. (In the
    stub's thread: what went wrong is the run's state message, which the test's assertions show.)"""
    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as started:
        deadline = time.monotonic() + 300
        while not watched.is_file():
            if started.poll() is not None or time.monotonic() > deadline:
                started.kill()
                return "FAILED", f"test driver: {watched} not written (driver exit {started.poll()})"
            time.sleep(0.02)
        tree = psutil.Process(started.pid).children(recursive=True)
        for process in [*tree, psutil.Process(started.pid)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(tree, timeout=30)
    return "FAILED", "The driver of the cluster was lost mid-run."


def cluster_env() -> dict[str, str]:
    """The driver's environment: no Databricks credentials there, a local Spark master for its ranks."""
    env = subprocess_env(MASTER="local[2]")
    return {k: v for k, v in env.items() if not k.startswith("DATABRICKS_")}


def user_env(stub: DatabricksStub, **extra: str) -> dict[str, str]:
    return subprocess_env(DATABRICKS_HOST=stub.url, DATABRICKS_TOKEN=TOKEN, **extra)


def one_hint(done: subprocess.CompletedProcess, log: Path) -> str:
    """The train job's one line (in its log, which the profile shows), and that it is one line with a HINT."""
    lines = [line for line in log.read_text().splitlines() if "HINT:" in line]
    assert done.returncode == 1 and len(lines) == 1, done.stdout + done.stderr
    return lines[0]


@dataclass
class Submitted:
    """The module's workflow: a cancelled submission, a lost driver's, the rerun that resumed and finished
    (each through `snakemake --profile databricks`), the same command again and one refused before any job."""

    flow: Workflow
    stub: DatabricksStub
    cancelled: str
    failed: str
    saved: int
    resumes: str  # the checkpoint the lost driver's run resumes from: the newest that came back whole
    staged: list[str]
    done: subprocess.CompletedProcess
    again: subprocess.CompletedProcess
    refused: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def submitted(tmp_path_factory) -> Iterator[Submitted]:
    root = tmp_path_factory.mktemp("databricks")
    stub = DatabricksStub(root / "workspace", TOKEN)
    try:
        flow = Workflow(root / "flow", profile="databricks")
        flow.directory.mkdir()
        flow.write_config(CONFIG)
        log = flow.directory / "logs" / "train" / "devices-2.log"
        run = flow.directory / "results" / "runs" / "devices-2"
        stub.runner = lambda body, root: ("CANCELED", "Run cancelled by alice@example.com.")
        cancelled = one_hint(flow.run(env=user_env(stub), check=False), log)
        # A run whose driver is lost mid-training, once its first last.ckpt is on the volume.
        stub.runner = driver(cluster_env(), lost_after="checkpoints/last.ckpt")
        failed = one_hint(flow.run(env=user_env(stub), check=False), log)
        assert not (run / "provenance.json").exists() and not (run / "finished.json").exists()
        saved = len((run / "metrics.csv").read_text().splitlines()) - 1
        assert (run / "checkpoints" / "last.ckpt").is_file(), failed
        # last.ckpt, or a later epoch's top-k checkpoint where the driver was lost between the two saves.
        resumes = tries.newest_checkpoint(run)
        assert resumes is not None
        # As the HINTs say: the same command again, with the cluster working.
        stub.runner = driver(cluster_env())
        puts = len(stub.requests("PUT", "/api/2.0/fs/files"))
        done = flow.run(env=user_env(stub))
        staged = [seen["path"] for seen in stub.requests("PUT", "/api/2.0/fs/files")[puts:]]
        again = flow.run(env=user_env(stub))
        # A GPU run on a CPU runtime, refused before any job (nothing is sent).
        refused = flow.run("--config", "launch={accelerator: gpu}", env=user_env(stub), check=False)
        yield Submitted(flow, stub, cancelled, failed, saved, resumes.name, staged, done, again, refused)
    finally:
        stub.close()


@pytest.fixture(scope="module")
def finished(submitted: Submitted) -> Finished:
    return Finished(submitted.flow.directory, submitted.again, submitted.refused)


class TestDatabricksConformance(Conformance):
    platform = "databricks"
    ranks_as = "spark"
    refused_says = "is not a GPU ML runtime (*-gpu-ml-*)"


def test_a_run_is_staged_submitted_waited_for_and_copied_back(submitted: Submitted):
    flow, stub, done = submitted.flow, submitted.stub, submitted.done
    # A cancelled run and a failed one: one line each, with the state message, and no finished record.
    assert (
        "was cancelled: Run cancelled by alice@example.com." in submitted.cancelled
        and "HINT: rerun the same command" in submitted.cancelled
    )
    # The driver lost mid-training, once its first last.ckpt was on the volume: what it saved came back.
    failed = submitted.failed
    assert "ended FAILED: The driver of the cluster was lost mid-run." in failed, failed
    assert "HINT: fix what it says" in failed and "it resumes from the newest checkpoint that came back." in failed
    assert 1 <= submitted.saved < 6, submitted.saved
    # The rerun's job resumed from the newest checkpoint that came back (below), staged on the volume beside the
    # run's folder (the job's entry seeds it from there).
    assert f"/api/2.0/fs/files{STAGE}/resume/devices-2/checkpoints/last.ckpt" in submitted.staged
    run = flow.directory / "results" / "runs" / "devices-2"
    provenance = json.loads((run / "provenance.json").read_text())
    assert provenance["launch"]["launcher"] == "torchdistributor"
    assert provenance["training"]["resumed_from"]["path"] == f"checkpoints/{submitted.resumes}"
    assert provenance["training"]["epochs_completed"] == 6
    epochs = [int(row.split(",")[0]) for row in (run / "metrics.csv").read_text().splitlines()[1:]]
    assert epochs == list(range(6)), "the resumed run went on from the saved epoch, none trained twice"
    assert (flow.directory / "results" / "report" / "report.html").is_file()
    # The run's own Spark driver started its session's JVM on the pipe that leaves out the JVM's incubator note.
    printed = (stub.root / "driver.log").read_text()
    assert "WARNING: Using incubator modules" not in printed and "Setting default log level" not in printed, printed
    # What the SDK sent: the request as written, with the token from its chain and the storage keys,
    # which the written request masks (keeping their names, and the secret reference as written).
    sent = stub.requests("POST", "/api/2.2/jobs/runs/submit")[-1]
    body, written = json.loads(sent["body"]), json.loads((run / "databricks" / "submit.json").read_text())
    assert scrub(body) == written and body != written
    assert body["tasks"][0]["new_cluster"]["spark_conf"].items() >= CLUSTER_CONF_SECRETS.items()
    kept = written["tasks"][0]["new_cluster"]["spark_conf"]
    assert {kept[name] for name in CLUSTER_CONF_SECRETS} == {"***", "{{secrets/ml/gcs-key}}"}
    assert sent["headers"]["Authorization"] == f"Bearer {TOKEN}"
    uploaded = {seen["path"] for seen in stub.requests("PUT", "/api/2.0/fs/files")}
    python_file = json.loads(sent["body"])["tasks"][0]["spark_python_task"]["python_file"]
    assert python_file.startswith(f"{STAGE}/code/") and f"/api/2.0/fs/files{python_file}" in uploaded
    puts = [seen["path"] for seen in stub.requests("PUT", "/api/2.0/fs/files")]
    assert puts.count(f"/api/2.0/fs/files{python_file}") == 1, "the unchanged code, staged once for three submissions"
    assert f"/api/2.0/fs/files{STAGE}/results/runs/devices-2/run.yaml" in uploaded
    assert any(path.endswith("/manifest-3.json") for path in uploaded)
    assert stub.requests("GET", "/api/2.2/jobs/runs/get")
    # The token and the storage keys reach no file the workflow wrote, and no line it printed.
    secrets = [TOKEN, *STORAGE_KEY_VALUES]
    for top in ("results", "logs", ".snakemake"):
        for path in (flow.directory / top).rglob("*"):
            if path.is_file():
                assert not leaked(path.read_bytes(), secrets), path
    assert not leaked(done.stdout + done.stderr, secrets)
    # Again (the conformance checks read that it had nothing to do) and refused: nothing more sent.
    assert len(stub.requests("POST", "/api/2.2/jobs/runs/submit")) == 3


def test_the_stub_refuses_a_request_the_sdks_types_do_not_describe(stub):
    """What makes "it is accepted" mean something: a submitted run or a created cluster with a field the SDK
    does not have, a required one missing or a value of another type is refused as the REST API refuses it."""
    from databricks.sdk.errors import InvalidParameterValue

    client = WorkspaceClient(host=stub.url, token=TOKEN)
    task = {"task_key": "train", "spark_python_task": {"python_file": "/Volumes/a/b/c/entry.py"}}
    cluster = {"spark_version": "16.4.x-scala2.12", "num_workers": 1, "node_type_id": "i3.xlarge"}
    refused = {
        "unknown field tasks[0].new_cluster.num_worker": {
            "tasks": [{**task, "new_cluster": {**cluster, "num_worker": 1}}]
        },
        "missing required field tasks[0].task_key": {"tasks": [{"spark_python_task": task["spark_python_task"]}]},
        "tasks[0].new_cluster.num_workers: '1' is not a int": {
            "tasks": [{**task, "new_cluster": {**cluster, "num_workers": "1"}}]
        },
    }
    for said, body in refused.items():
        with pytest.raises(InvalidParameterValue, match=re.escape(said)):
            client.api_client.do("POST", "/api/2.2/jobs/runs/submit", body=body)
    with pytest.raises(InvalidParameterValue, match="missing required field spark_version"):
        client.api_client.do("POST", "/api/2.1/clusters/create", body={"num_workers": 1})
    assert not stub.runs and not stub.clusters
    answer = client.api_client.do(
        "POST", "/api/2.2/jobs/runs/submit", body={"tasks": [{**task, "new_cluster": cluster}]}
    )
    assert answer["run_id"] in stub.runs


def test_an_unsent_request_masks_its_storage_keys_and_sent_with_them_put_back_it_is_accepted(
    tmp_path, stub, monkeypatch, capsys
):
    """databricks.submit: false writes the request and sends nothing, and says that its files are staged only when
    it is sent (the HINT: submit: true); the request, its values put back where it shows ***, is one the API
    accepts, sent with the SDK's own client."""
    submission = prepare(tmp_path / "flow", stub, TOKEN, monkeypatch, {})
    section = {"stage": STAGE, "submit": False, "new_cluster": CLUSTER}
    monkeypatch.setenv(variables.PLATFORM_SECTION, json.dumps(config.validate({"databricks": section})["databricks"]))
    code, said = submission.submit(capsys)
    lines = [line for line in said.splitlines() if "HINT:" in line]
    assert code == 1 and len(lines) == 1, said
    assert "databricks.submit is false" in lines[0] and "with *** where the config has a secret" in lines[0]
    assert "uploaded only when it is sent. HINT: set databricks.submit: true and rerun." in lines[0], lines[0]
    written_file = submission.run_dir / "databricks" / "submit.json"
    written = json.loads(written_file.read_text())
    cluster_conf = written["tasks"][0]["new_cluster"]["spark_conf"]
    assert cluster_conf["spark.hadoop.fs.s3a.session.token"] == "***"
    assert cluster_conf["spark.hadoop.fs.gs.auth.service.account.private.key"] == "{{secrets/ml/gcs-key}}"
    assert not leaked(written_file.read_text() + said, STORAGE_KEY_VALUES)
    assert not stub.requests("POST", "/api/2.2/jobs/runs/submit"), "nothing sent"
    # The request as the API takes it: the values back where it shows ***, then POST /api/2.2/jobs/runs/submit.
    for name, value in CLUSTER_CONF_SECRETS.items():
        if cluster_conf[name] == "***":
            cluster_conf[name] = value
    client = WorkspaceClient(host=stub.url, token=TOKEN)
    answer = client.api_client.do("POST", "/api/2.2/jobs/runs/submit", body=written)
    assert answer["run_id"] in stub.runs
    (sent,) = stub.requests("POST", "/api/2.2/jobs/runs/submit")
    assert json.loads(sent["body"])["tasks"][0]["new_cluster"]["spark_conf"].items() >= CLUSTER_CONF_SECRETS.items()
