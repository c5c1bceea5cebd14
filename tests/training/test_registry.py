"""tracking.mlflow.register_model against a real `mlflow server`: the exported best model (safetensors + JSON)
is the run's model/ artifacts and a new version of the name, tagged with where it came from."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

import snakeddp
from snakeddp import config
from snakeddp.run.runs import load_run, read_metrics
from snakeddp.training import registry
from snakeddp.training.safe_load import read_checkpoint
from snakeddp.util.hashing import sha256_file
from snakeddp.workflow import jobenv
from tests.helpers import launch, prepare
from tests.training.conftest import REGISTERED, tracking_env

pytestmark = pytest.mark.e2e


def test_the_best_model_is_one_new_version_whose_files_are_the_export(tracked_run, tmp_path):
    tmp, run_dir, server = tracked_run
    client = server.client()
    provenance = json.loads((run_dir / "provenance.json").read_text())
    (version,) = client.search_model_versions(f"name = '{REGISTERED}'")
    state = json.loads((run_dir / "tracking" / "state.json").read_text())
    assert state["registered_model"] == {
        "name": REGISTERED,
        "version": int(version.version),
        "attempt": provenance["attempt"]["id"],
        "weights_sha256": version.tags["snakeddp.weights_sha256"],
    }
    assert provenance["tracking"]["mlflow"]["register_model"] == REGISTERED
    assert version.run_id == provenance["tracking"]["mlflow"]["run_id"]
    assert version.tags["snakeddp.run_id"] == "base" and version.tags["snakeddp.attempt"] == provenance["attempt"]["id"]
    assert version.tags["snakeddp.provenance_sha256"] == sha256_file(run_dir / "provenance.json")
    assert f"registered its best model as {REGISTERED} version {version.version}" in (tmp / "launch.log").read_text()

    # The version's source holds the export: two plain files whose checksums model.json records.
    folder = Path(client.download_artifacts(version.run_id, registry.ARTIFACT_PATH, str(tmp_path)))
    assert sorted(p.name for p in folder.iterdir()) == ["model.json", "model.safetensors"]
    assert version.source.endswith(f"/{registry.ARTIFACT_PATH}")
    description = json.loads((folder / "model.json").read_text())
    weights = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert weights == description["weights"]["sha256"] == version.tags["snakeddp.weights_sha256"]
    best = provenance["training"]["best_checkpoint"]
    assert description["run"]["checkpoint"]["sha256"] == best["sha256"]

    # Loaded from what the registry holds, it is the best checkpoint's model.
    model = snakeddp.load(folder)
    state_dict = read_checkpoint(load_run(run_dir).file(best))["state_dict"]
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state_dict[name]), name

    # Rerunning the finished run (in a copy: the trackers' tests read the original) restores it:
    # nothing trains, nothing new is registered.
    copy = tmp_path / "rerun"
    shutil.copytree(tmp, copy)
    manifest = next((copy / "data").glob("manifest-*.json"))
    done = launch(copy / "run.yaml", manifest, copy / "results" / "runs" / "base", cwd=copy, **tracking_env(server))
    assert done.returncode == 0 and "restored it, nothing trained" in done.stdout + done.stderr
    assert len(client.search_model_versions(f"name = '{REGISTERED}'")) == 1

    # The next finished attempt of any run adds a version to the same name.
    again = registry.register(client, version.run_id, run_dir, REGISTERED)
    assert again["version"] == int(version.version) + 1


def test_a_name_the_registry_refuses_is_one_line_and_the_rerun_it_hints_registers_without_training(
    tmp_path, mlflow_server
):
    run_yaml, manifest, _ = prepare(tmp_path, {"trainer": {"max_epochs": 2, "early_stopping": {"enabled": False}}})
    run_dir = tmp_path / "results" / "runs" / "base"

    def train(name: str):
        mlflow = {"enabled": True, "tracking_uri": mlflow_server.uri, "experiment": "refused", "register_model": name}
        settings = config.validate({"tracking": {"mlflow": mlflow}})
        return launch(run_yaml, manifest, run_dir, cwd=tmp_path, **jobenv.settings(settings))

    done = train("team/model")
    assert done.returncode == 1
    (line,) = [line for line in (done.stdout + done.stderr).splitlines() if "HINT:" in line]
    assert "MLflow refused to register its model as 'team/model'" in line and "Names cannot contain '/'" in line
    assert "HINT: set tracking.mlflow.register_model to a name the registry accepts" in line
    assert not (run_dir / "finished.json").exists(), "not finished: the rerun goes on, it does not restore"

    # As the HINT says: another name, the same command again; nothing trains, the model is registered.
    done = train("team-model")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "base: epoch" not in done.stdout + done.stderr
        and "registered its best model as team-model version 1" in done.stdout
    )
    client = mlflow_server.client()
    (version,) = client.search_model_versions("name = 'team-model'")
    assert version.tags["snakeddp.provenance_sha256"] == sha256_file(run_dir / "provenance.json")
    assert len(read_metrics(run_dir / "metrics.csv")) == 2
