"""`snakemake --profile databricks` end to end against a local HTTP server that speaks the part of
Databricks' REST API snakeddp uses (tests/databricks_server.py): databricks-sdk's own client stages,
submits, polls and copies back; the server records what it sent, and runs the submitted task the
way the job cluster's driver would (the staged entry, its paths through the volume's mount, on a
local Spark master). No Databricks workspace is reachable from here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.databricks_server import DatabricksStub
from tests.helpers import TINY, Workflow, subprocess_env

pytestmark = pytest.mark.e2e

STAGE = "/Volumes/main/ml/snakeddp"
TOKEN = "dapi-5e1c7a-stub-token-0f3b"
CLUSTER = {"spark_version": "16.4.x-cpu-ml-scala2.12", "node_type_id": "Standard_D4ds_v5"}
CONFIG = {
    **TINY,
    "trainer": {**TINY["trainer"], "max_epochs": 2},
    "sweep": {"launch.devices": [2]},
    "databricks": {"stage": STAGE, "new_cluster": CLUSTER},
}


def driver(env: dict[str, str], fail: str | None = None):
    """What the job cluster's driver does with the submitted task: run its python_file with its
    parameters, the volume's paths through the mount (the stub's folder). ``fail``: exit 1 with
    this line before training, as a broken cluster would."""

    def run(body: dict[str, Any], root: Path) -> tuple[str, str]:
        if fail:
            return "FAILED", fail
        task = body["tasks"][0]["spark_python_task"]

        def mount(value: str) -> str:
            return str(root / value.lstrip("/")) if value.startswith(("/Volumes/", "/Workspace/")) else value

        argv = [sys.executable, mount(task["python_file"]), *map(mount, task["parameters"])]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        Path(root / "driver.log").write_text(done.stdout + done.stderr)
        lines = done.stderr.strip().splitlines()
        return ("SUCCESS", "") if done.returncode == 0 else ("FAILED", lines[-1] if lines else "exit 1")

    return run


@pytest.fixture
def stub(tmp_path: Path):
    server = DatabricksStub(tmp_path / "workspace", TOKEN)
    yield server
    server.close()


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


def test_a_run_is_staged_submitted_waited_for_and_copied_back(tmp_path, stub):
    flow = Workflow(tmp_path / "flow", profile="databricks")
    flow.directory.mkdir()
    flow.write_config(CONFIG)
    log = flow.directory / "logs" / "train" / "devices-2.log"
    run = flow.directory / "results" / "runs" / "devices-2"
    # A cancelled run and a failed one: one line each, with the state message, and no finished record.
    stub.runner = lambda body, root: ("CANCELED", "Run cancelled by alice@example.com.")
    cancelled = one_hint(flow.run(env=user_env(stub), check=False), log)
    assert (
        "was cancelled: Run cancelled by alice@example.com." in cancelled
        and "HINT: rerun the same command" in cancelled
    )
    stub.runner = driver(cluster_env(), fail="Cluster terminated: the driver was lost.")
    failed = one_hint(flow.run(env=user_env(stub), check=False), log)
    assert "ended FAILED: Cluster terminated: the driver was lost." in failed and "HINT: fix what it says" in failed
    assert not (run / "provenance.json").exists() and not (run / "finished.json").exists()
    # As the HINTs say: the same command again, with the cluster working.
    stub.runner = driver(cluster_env())
    done = flow.run(env=user_env(stub))
    run = flow.directory / "results" / "runs" / "devices-2"
    provenance = json.loads((run / "provenance.json").read_text())
    assert provenance["launch"]["launcher"] == "torchdistributor"
    assert (flow.directory / "results" / "report" / "report.html").is_file()
    # What the SDK sent: the request as written, with the token from its chain.
    sent = stub.requests("POST", "/api/2.2/jobs/runs/submit")[-1]
    assert json.loads(sent["body"]) == json.loads((run / "databricks" / "submit.json").read_text())
    assert sent["headers"]["Authorization"] == f"Bearer {TOKEN}"
    uploaded = {seen["path"] for seen in stub.requests("PUT", "/api/2.0/fs/files")}
    python_file = json.loads(sent["body"])["tasks"][0]["spark_python_task"]["python_file"]
    assert python_file.startswith(f"{STAGE}/code/") and f"/api/2.0/fs/files{python_file}" in uploaded
    puts = [seen["path"] for seen in stub.requests("PUT", "/api/2.0/fs/files")]
    assert puts.count(f"/api/2.0/fs/files{python_file}") == 1, "the unchanged code, staged once for three submissions"
    assert f"/api/2.0/fs/files{STAGE}/results/runs/devices-2/run.yaml" in uploaded
    assert any(path.endswith("/manifest-3.json") for path in uploaded)
    assert stub.requests("GET", "/api/2.2/jobs/runs/get")
    # The token reaches no file the workflow wrote, and no line it printed.
    for path in (flow.directory / "results").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".yaml", ".csv", ".html", ".log", ".txt"):
            assert TOKEN not in path.read_text(errors="replace"), path
    for path in (flow.directory / "logs").rglob("*.log"):
        assert TOKEN not in path.read_text(errors="replace"), path
    assert TOKEN not in done.stdout + done.stderr
    # Again: nothing to do, nothing sent.
    again = flow.run(env=user_env(stub))
    assert "Nothing to be done" in again.stdout + again.stderr
    assert len(stub.requests("POST", "/api/2.2/jobs/runs/submit")) == 3
