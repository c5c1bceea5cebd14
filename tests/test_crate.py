"""The report's Workflow Run RO-Crate, read back with rocrate and held to the profiles' requirements."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from rocrate.rocrate import ROCrate

from snakeddp.hashing import sha256_file

pytestmark = pytest.mark.e2e
RUNS = ("devices-1", "devices-2")
PROFILES = {
    "https://w3id.org/ro/wfrun/process/0.6",
    "https://w3id.org/ro/wfrun/workflow/0.6",
    "https://w3id.org/ro/wfrun/provenance/0.6",
    "https://w3id.org/workflowhub/workflow-ro-crate/1.1",
}
# Terms the Workflow Run context adds to RO-Crate 1.3's (https://w3id.org/ro/terms/workflow-run/context).
WORKFLOW_RUN_TERMS = {"environment", "containerImage"}


@pytest.fixture(scope="module")
def crate(sweep_workflow) -> ROCrate:
    return ROCrate(sweep_workflow.directory / "results/report")


@pytest.fixture(scope="module")
def provenance(sweep_workflow) -> dict[str, dict]:
    runs = sweep_workflow.directory / "results/runs"
    return {run: json.loads((runs / run / "provenance.json").read_text()) for run in RUNS}


def ids(value) -> list[str]:
    """@ids of an entity, a {"@id"} reference, a plain id, or a list of them."""
    items = value if isinstance(value, list) else [value]
    return [v.id if hasattr(v, "id") else v["@id"] if isinstance(v, dict) else v for v in items]


def test_root_conforms_to_the_run_crate_profiles(crate):
    assert ids(crate.metadata["conformsTo"]) == ["https://w3id.org/ro/crate/1.3"]
    assert PROFILES <= set(ids(crate.root_dataset["conformsTo"]))
    assert crate.root_dataset["name"] == "snakeddp runs" and crate.root_dataset["datePublished"]
    assert ids(crate.root_dataset["mentions"]) == ["#workflow-run"]


def test_main_entity_is_the_snakefile_with_its_steps(crate, sweep_workflow):
    workflow = crate.mainEntity
    assert {"File", "SoftwareSourceCode", "ComputationalWorkflow"} <= set(workflow.type)
    assert workflow["programmingLanguage"].id.endswith("#snakemake")
    repo = Path(__file__).resolve().parents[1]
    assert (crate.source / workflow.id).read_bytes() == (repo / "Snakefile").read_bytes()
    steps = {step["name"]: step for step in workflow["step"]}
    assert {"data_partition", "data_manifest", "train"} <= set(steps)
    assert steps["train"]["workExample"].id == "#snakeddp.train"


def test_each_run_is_a_create_action_with_its_inputs_outputs_and_agent(crate, provenance):
    for run, record in provenance.items():
        action = crate.get(f"#run-{run}")
        assert action.type == "CreateAction"
        assert action["instrument"].id == "#snakeddp.train"
        assert action["startTime"] == record["timing"]["started_at"]
        assert action["endTime"] == record["timing"]["finished_at"]
        assert action["agent"]["name"] == record["launch"]["user"]
        objects = {e.id: e for e in action["object"]}
        manifest = next(e for i, e in objects.items() if "/manifest-" in i)
        assert manifest["sha256"] == record["data"]["manifest_sha256"] == sha256_file(crate.source / manifest.id)
        assert f"files/runs/{run}/run.yaml" in objects
        sweep_value = next(e for e in objects.values() if e.type == "PropertyValue")
        assert (sweep_value["name"], sweep_value["value"]) == ("launch.devices", run[-1])
        assert sweep_value["exampleOfWork"] in crate.get("#snakeddp.train")["input"]
        results = {e.id: e for e in action["result"]}
        for checkpoint in record["training"]["checkpoints"]:
            entity = results[f"files/runs/{run}/{checkpoint['path']}"]
            assert entity["sha256"] == checkpoint["sha256"] == sha256_file(crate.source / entity.id)
        assert {f"files/runs/{run}/metrics.csv", f"files/runs/{run}/provenance.json"} <= set(results)
        environment = {e["name"]: e["value"] for e in action["environment"]}
        assert environment == record["launch"]["variables"]


def test_engine_orchestrates_the_runs(crate):
    organize = crate.get("#snakemake-run")
    assert organize.type == "OrganizeAction" and organize["instrument"]["name"] == "Snakemake"
    assert organize["result"].id == "#workflow-run"
    controlled = sorted(control["object"].id for control in organize["object"])
    assert controlled == [f"#run-{run}" for run in RUNS]
    assert all(control["instrument"].id.endswith("#train") for control in organize["object"])
    workflow_run = crate.get("#workflow-run")
    assert workflow_run["instrument"] is crate.mainEntity
    assert any(e.id.endswith("config.yaml") for e in workflow_run["object"])
    assert "report.html" in ids(workflow_run["result"])


def test_every_file_is_in_the_crate_and_every_term_is_defined(crate, sweep_workflow):
    root = crate.source
    for entity in crate.data_entities:
        assert (root / entity.id).is_file(), entity.id
    # Checkpoints are hard links of the run's files, not copies.
    original = sweep_workflow.directory / "results/runs/devices-1/checkpoints/last.ckpt"
    assert (root / "files/runs/devices-1/checkpoints/last.ckpt").samefile(original)
    context = json.loads(resources.files("rocrate").joinpath("data/ro-crate.jsonld").read_text())["@context"]
    metadata = json.loads((root / "ro-crate-metadata.json").read_text())
    assert metadata["@context"][1] == "https://w3id.org/ro/terms/workflow-run/context"
    used = {key for entity in metadata["@graph"] for key in entity if not key.startswith("@")}
    assert not used - set(context) - WORKFLOW_RUN_TERMS
