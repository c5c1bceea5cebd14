"""The report's Workflow Run RO-Crate: read back with rocrate, held to the profiles' requirements, and
checked by an independent validator (roc-validator), offline."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import urllib3
from requests.adapters import BaseAdapter, HTTPAdapter
from requests_cache import CachedSession
from rocrate.rocrate import ROCrate

from snakeddp.util.hashing import sha256_file
from tests.helpers import REPO

pytestmark = pytest.mark.e2e
RUNS = ("devices-1", "devices-2")
PROFILES = {
    "https://w3id.org/ro/wfrun/process/0.5",
    "https://w3id.org/ro/wfrun/workflow/0.5",
    "https://w3id.org/ro/wfrun/provenance/0.5",
    "https://w3id.org/workflowhub/workflow-ro-crate/1.0",
}
# The JSON-LD contexts the crate names, kept as test data (sources and licences in their README).
CONTEXTS = Path(__file__).parent / "rocrate"
CONTEXT_FILES = {
    "https://w3id.org/ro/crate/1.1/context": CONTEXTS / "ro-crate-1.1-context.jsonld",
    "https://w3id.org/ro/terms/workflow-run/context": CONTEXTS / "workflow-run-context.jsonld",
}


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
    assert "https://w3id.org/ro/crate/1.1" in ids(crate.metadata["conformsTo"])
    assert PROFILES <= set(ids(crate.root_dataset["conformsTo"]))
    assert all(profile.type == "CreativeWork" for profile in crate.root_dataset["conformsTo"])
    assert crate.root_dataset["name"] == "snakeddp runs" and crate.root_dataset["datePublished"]
    assert crate.root_dataset["license"].id == "https://spdx.org/licenses/MIT"
    mentioned = ids(crate.root_dataset["mentions"])
    assert mentioned[0] == "#workflow-run" and {f"#run-{run}" for run in RUNS} <= set(mentioned)
    assert all(crate.get(action).type == "CreateAction" for action in mentioned)


def test_main_entity_is_the_snakefile_with_its_steps(crate, sweep_workflow):
    workflow = crate.mainEntity
    assert {"File", "SoftwareSourceCode", "ComputationalWorkflow"} <= set(workflow.type)
    assert workflow["programmingLanguage"].id.endswith("#snakemake")
    assert (crate.source / workflow.id).read_bytes() == (REPO / "Snakefile").read_bytes()
    assert "HowTo" in workflow.type
    steps = {step["name"]: step for step in workflow["step"]}
    assert {"data_partition", "data_manifest", "train"} <= set(steps)
    assert steps["train"]["workExample"].id == "#snakeddp.train"
    # Every step names its tool, and the tools are the workflow's parts.
    tools = {step["workExample"].id for step in steps.values()}
    assert len(tools) == len(steps) and tools == set(ids(workflow["hasPart"]))
    for tool in map(crate.get, tools):
        assert tool.type == "SoftwareApplication" and tool["version"] and "softwareVersion" not in tool


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
    controlled = sorted(c["object"].id for c in organize["object"] if c["object"].id.startswith("#run-"))
    assert controlled == [f"#run-{run}" for run in RUNS]
    # A ControlAction per step execution, each tying its step to its tool's action.
    steps = {control["instrument"]["name"] for control in organize["object"]}
    assert steps == {step["name"] for step in crate.mainEntity["step"]}
    for control in organize["object"]:
        assert control["object"]["instrument"].id == control["instrument"]["workExample"].id
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
    metadata = json.loads((root / "ro-crate-metadata.json").read_text())
    assert metadata["@context"] == list(CONTEXT_FILES)
    defined = set().union(*(json.loads(path.read_text())["@context"] for path in CONTEXT_FILES.values()))
    used = {key for entity in metadata["@graph"] for key in entity if not key.startswith("@")}
    assert used and not used - defined


class ContextFiles(BaseAdapter):
    """Answers the contexts' URLs with the files kept in tests/report/rocrate, and nothing else."""

    def send(self, request: requests.PreparedRequest, **kwargs) -> requests.Response:
        body = CONTEXT_FILES[request.url].read_bytes()
        raw = urllib3.HTTPResponse(
            body=io.BytesIO(body), headers={"Content-Type": "application/ld+json"}, status=200, preload_content=False
        )
        return HTTPAdapter().build_response(request, raw)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def validator_cache(tmp_path_factory) -> Path:
    """roc-validator's HTTP cache (requests-cache's SQLite store, which ``--cache-path`` names) holding
    the contexts, as ``rocrate-validator cache warm`` would leave it after fetching them online."""
    cache = tmp_path_factory.mktemp("roc-validator") / "http_cache"
    with CachedSession(str(cache), backend="sqlite", expire_after=-1, allowable_codes=(200,)) as session:
        session.mount("https://", ContextFiles())
        for url in CONTEXT_FILES:
            assert session.get(url).status_code == 200
    return cache


def validate(crate_dir: Path, cache: Path, report: Path) -> dict:
    """The validator's command line, offline, with the required checks of the Provenance Run Crate
    profile and the profiles it builds on; every proxy points at a closed port, so a fetch fails."""
    blocked = "http://127.0.0.1:9"
    env = {**os.environ, "http_proxy": blocked, "https_proxy": blocked, "HTTP_PROXY": blocked,
           "HTTPS_PROXY": blocked, "XDG_CACHE_HOME": str(report.parent / "xdg")}  # fmt: skip
    env.pop("NO_PROXY", None), env.pop("no_proxy", None)
    validator = Path(sys.executable).with_name("rocrate-validator")
    command = [str(validator), "--no-interactive", "--disable-color", "validate", "--offline", "--cache-path",
               str(cache), "--profile-identifier", "provenance-run-crate", "--requirement-severity", "required",
               "--no-paging", "--output-format", "json", "--output-file", str(report), str(crate_dir)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert report.is_file(), done.stdout + done.stderr
    result = json.loads(report.read_text())
    assert done.returncode == (0 if result["passed"] else 1), done.stdout + done.stderr
    return result


def test_roc_validator_passes_the_required_checks(sweep_workflow, validator_cache, tmp_path):
    result = validate(sweep_workflow.directory / "results/report", validator_cache, tmp_path / "report.json")
    assert result["passed"], json.dumps(result["issues"], indent=1)
    statistics = result["statistics"]
    assert {"provenance-run-crate-0.5", "workflow-run-crate-0.5", "process-run-crate-0.5", "ro-crate-1.1",
            "workflow-ro-crate-1.0"} <= set(statistics["profiles"])  # fmt: skip
    assert statistics["total_checks_by_severity"]["REQUIRED"] == statistics["total_passed_checks"] > 50


def test_roc_validator_fails_a_crate_without_license(sweep_workflow, validator_cache, tmp_path):
    """The check above can fail: the same crate without the root's licence does not pass."""
    crate_dir = tmp_path / "crate"
    shutil.copytree(sweep_workflow.directory / "results/report", crate_dir, copy_function=os.link,
                    ignore=shutil.ignore_patterns("ro-crate-metadata.json"))  # fmt: skip
    metadata = json.loads((sweep_workflow.directory / "results/report/ro-crate-metadata.json").read_text())
    root = next(entity for entity in metadata["@graph"] if entity["@id"] == "./")
    del root["license"]
    (crate_dir / "ro-crate-metadata.json").write_text(json.dumps(metadata))
    result = validate(crate_dir, validator_cache, tmp_path / "report.json")
    assert not result["passed"]
    assert {issue["violatingProperty"] for issue in result["issues"]} == {"http://schema.org/license"}


def test_roc_validator_fetches_nothing(sweep_workflow, tmp_path):
    """Without the contexts in its cache the offline validator cannot pass: the kept files are what it reads."""
    empty = tmp_path / "empty-cache"
    result = validate(sweep_workflow.directory / "results/report", empty, tmp_path / "report.json")
    assert not result["passed"]
    assert any("Unable to retrieve the JSON-LD context" in str(issue["message"]) for issue in result["issues"])
