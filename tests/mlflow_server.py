"""A real MLflow tracking server on localhost for the tests: ``mlflow server`` from the dev lock (mlflow-skinny
plus Flask, Flask-CORS and alembic), a sqlite backend store (so it has a model registry) and artifacts
proxied into a temporary folder, as a team's server would be set up. Session-scoped in tests/conftest.py:
only the tests that ask for ``mlflow_server`` start it, once.

Started with one worker and no job runner (MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false): uvicorn's 4
default workers and MLflow's huey consumers took 19 s to answer here, one worker 8-11 s (2 busy cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.azurite import free_port  # a localhost port nothing listens on now (the kernel's pick)

START_TIMEOUT_S = 90


@dataclass(frozen=True)
class MlflowServer:
    uri: str
    log: Path
    started_in_s: float

    def client(self):
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)


def answers(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def serve(folder: Path, port: int | None = None) -> Iterator[MlflowServer]:
    """Start the server under ``folder`` (on ``port``: the one a stopped server had, to start it again), yield it
    once it answers /health, stop it afterwards."""
    port = port or free_port()
    uri = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    argv += ["--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}"]
    argv += ["--artifacts-destination", str(folder / "artifacts")]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = folder / "server.log"
    started = time.perf_counter()
    with log.open("w") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while not answers(uri):
            if server.poll() is not None or time.perf_counter() - started > START_TIMEOUT_S:
                tail = log.read_text()[-3000:]
                raise RuntimeError(
                    f"mlflow server did not answer at {uri} (exit {server.poll()}); its log:\n{tail}\n"
                    "HINT: tools/setup.sh --dev installs what it needs (envs/requirements-dev.lock)."
                )
            time.sleep(0.2)
        yield MlflowServer(uri=uri, log=log, started_in_s=time.perf_counter() - started)
    finally:
        # Its own session: uvicorn's worker goes with the group.
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()
