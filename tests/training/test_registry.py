"""tracking.mlflow.register_model against a real `mlflow server`: the exported best model (safetensors + JSON)
is the run's model/ artifacts and a new version of the name, tagged with where it came from."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

import snakeddp
from snakeddp.errors import TrackerError
from snakeddp.run.runs import load_run
from snakeddp.training import registry
from snakeddp.training.safe_load import read_checkpoint
from snakeddp.util.hashing import sha256_file
from tests.training.conftest import REGISTERED

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


def test_a_name_the_registry_refuses_is_one_line_and_a_name_it_accepts_registers(tracked_run):
    _, run_dir, server = tracked_run
    client = server.client()
    mlflow_run_id = json.loads((run_dir / "provenance.json").read_text())["tracking"]["mlflow"]["run_id"]
    with pytest.raises(TrackerError) as error:
        registry.register(client, mlflow_run_id, run_dir, "team/model")
    message = str(error.value)
    assert "\n" not in message and "Names cannot contain '/'" in message and "HINT: set tracking.mlflow" in message
    # As the HINT says: another name registers.
    registered = registry.register(client, mlflow_run_id, run_dir, "team-model")
    assert registered["version"] == 1
    assert client.get_model_version("team-model", "1").run_id == mlflow_run_id
