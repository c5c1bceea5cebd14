"""One run submitted to the local Databricks stub the way the databricks profile's train job submits it:
``python -m snakeddp.launch --platform databricks`` with the run's run.yaml, run directory and data
manifest laid out as the workflow lays them out (results/runs/<run>/, results/data/<dataset>/), in
this process (its imports are the test's), the SDK reaching the stub with the token from its chain."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.datasets import ensure_dataset
from snakeddp import config, launch
from snakeddp.run import variables
from snakeddp.run.runfile import RunFile
from tests.databricks_server import DatabricksStub
from tests.helpers import TINY

STAGE = "/Volumes/main/ml/snakeddp"
CLUSTER = {"spark_version": "16.4.x-cpu-ml-scala2.12", "node_type_id": "Standard_D4ds_v5"}


@dataclass
class Submission:
    directory: Path
    run_id: str
    manifest: Path
    stub: DatabricksStub

    @property
    def run_dir(self) -> Path:
        return self.directory / "results" / "runs" / self.run_id

    @property
    def remote_run_dir(self) -> Path:
        """The run's folder on the stub's volume, as the job cluster's mount shows it."""
        return self.stub.local(f"{STAGE}/results/runs/{self.run_id}")

    def argv(self) -> list[str]:
        return ["--platform", "databricks", "--config", str(self.run_dir / "run.yaml"),
                "--run-dir", str(self.run_dir), "--data", str(self.manifest)]  # fmt: skip

    def submit(self, capsys: pytest.CaptureFixture) -> tuple[int, str]:
        """The train job's command, once; its exit status and what it printed."""
        capsys.readouterr()
        code = launch.main(self.argv())
        said = capsys.readouterr()
        return code, said.out + said.err


def prepare(
    directory: Path, stub: DatabricksStub, token: str, monkeypatch: pytest.MonkeyPatch, overrides: dict[str, Any]
) -> Submission:
    """The run's run.yaml and dataset in ``directory``, and the environment the profile's train job has."""
    cfg = config.validate({**TINY, **overrides, "databricks": {"stage": STAGE, "new_cluster": CLUSTER}})
    run = RunFile(run_id="base", config=config.run_config(cfg))
    manifest = ensure_dataset(directory / "results" / "data", cfg["data"])
    submission = Submission(directory, run.run_id, manifest, stub)
    submission.run_dir.mkdir(parents=True)
    run.write(submission.run_dir / "run.yaml")
    monkeypatch.chdir(directory)
    monkeypatch.setenv("HOME", str(directory))  # no ~/.databrickscfg of this machine's
    monkeypatch.setenv("DATABRICKS_HOST", stub.url)
    monkeypatch.setenv("DATABRICKS_TOKEN", token)
    monkeypatch.setenv(variables.PLATFORM_SECTION, json.dumps(cfg["databricks"]))
    monkeypatch.setenv(variables.PLATFORM, "databricks")
    return submission
