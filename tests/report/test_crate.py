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

from snakeddp import config as configuration
from snakeddp.data.custom import write_module_record
from snakeddp.report.page import write_crate
from snakeddp.run import rules
from snakeddp.run.runs import load_run
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
# The rules whose jobs ran for a sweep of each data source (a table is ingested first; a module
# dataset has only its record). build_image runs only when asked for: the table's crate below is made
# after it ran.
RAN = {
    "synthetic": {"data_partition", "data_val", "data_manifest", "env_capture", "run_config", "train", "report"},
    "table": {"data_table", "data_manifest", "env_capture", "build_image", "run_config", "train", "report"},
    "module": {"data_module", "env_capture", "run_config", "train", "report"},
}  # fmt: skip
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
    # Every rule that ran is a step (read from snakeddp.run.rules, in its order); no other is.
    assert list(steps) == [step.rule for step in rules.STEPS if step.rule in RAN["synthetic"]]
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
    # A ControlAction per step execution, each tying its step to its tool's action: every rule that ran.
    steps = {control["instrument"]["name"] for control in organize["object"]}
    assert steps == RAN["synthetic"] == {step["name"] for step in crate.mainEntity["step"]}
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


def as_source(provenance: dict, source: str, workdir: Path) -> dict:
    """A run's provenance as the training records it for a dataset of ``source``: the same run, had its
    data come from a table, or from a user's DataModule (its record in place of the manifest)."""
    data, dataset = provenance["config"]["data"], provenance["data"]["dataset"]
    data["source"] = source
    if source == "table":
        data["table"] = {**data.get("table", {}), "path": "tables/train.csv"}
    if source == "module":
        data["module"] = "blobs:Blobs"
        record = workdir / "results" / "data" / dataset / "module.json"
        write_module_record(record, dataset, {"module": data["module"]})
        provenance["data"] = {"manifest": record.relative_to(workdir).as_posix(), "dataset": dataset,
                              "manifest_sha256": sha256_file(record), "partitions": None, "records": None}  # fmt: skip
        # The user's code as training records it: a module in the workflow's directory, and one edited since.
        (workdir / "blobs.py").write_text("class Blobs: ...\n")
        (workdir / "edited.py").write_text("class Net: ...\n")
        provenance["user_code"] = [
            {
                "role": "datamodule",
                "target": "blobs:Blobs",
                "file": "blobs.py",
                "sha256": sha256_file(workdir / "blobs.py"),
            },
            {"role": "model", "target": "edited:Net", "file": "edited.py", "sha256": "0" * 64},
        ]
    return provenance


@pytest.fixture(scope="module")
def source_crates(sweep_workflow, tmp_path_factory) -> dict[str, Path]:
    """For each data source: the sweep's runs as runs of that source, and the crate the report writes of them."""
    repo = REPO
    config = configuration.validate({})
    crates = {}
    for source in RAN:
        work = tmp_path_factory.mktemp(f"crate-{source}")
        for part in ("results", "logs"):
            shutil.copytree(sweep_workflow.directory / part, work / part, ignore=shutil.ignore_patterns("report"))
        runs = []
        for run in RUNS:
            path = work / "results" / "runs" / run / "provenance.json"
            path.write_text(json.dumps(as_source(json.loads(path.read_text()), source, work)))
            runs.append(load_run(path.parent))
        if "build_image" in RAN[source]:
            (work / "results" / "envs" / "image.json").write_text('{"tag": "snakeddp:0.1.0-torch2.13.0"}')
        report = work / "results" / "report"
        report.mkdir()
        (report / "report.html").write_text("<html><title>snakeddp runs</title></html>")
        write_crate(
            runs=runs,
            settings=config["report"],
            repo=repo,
            config_files=[repo / "config" / "config.yaml"],
            resolved_config=config,
            report_files=[report / "report.html"],
            out=report / "ro-crate-metadata.json",
        )
        crates[source] = report
    return crates


@pytest.mark.parametrize("source", sorted(RAN))
def test_a_crate_of_each_data_source_lists_every_rule_and_an_action_of_each_that_ran(source_crates, source):
    crate = ROCrate(source_crates[source])
    assert [step["name"] for step in crate.mainEntity["step"]] == [s.rule for s in rules.STEPS if s.rule in RAN[source]]
    controls = crate.get("#snakemake-run")["object"]
    assert {control["instrument"]["name"] for control in controls} == RAN[source]
    for control in controls:
        step = rules.BY_RULE[control["instrument"]["name"]]
        assert control["object"]["instrument"].id == step.tool == control["instrument"]["workExample"].id
    made = crate.get("#report-runs")
    assert {"files/runs/devices-1/provenance.json", "files/runs/devices-2/provenance.json"} <= set(ids(made["object"]))
    assert ids(made["result"]) == ["report.html"]


def test_a_table_dataset_is_ingested_from_its_table(source_crates):
    (ingest,) = [e for e in ROCrate(source_crates["table"]).contextual_entities if e.id.startswith("#data_table-")]
    assert ingest.type == "CreateAction" and ingest["description"].endswith("; from tables/train.csv")


def test_an_image_build_is_an_action_when_its_record_is_there(source_crates):
    crate = ROCrate(source_crates["table"])
    built = crate.get("#build_image-image")
    assert built["instrument"].id == rules.BY_RULE["build_image"].tool
    assert built["result"].id == "files/envs/image.json" and (source_crates["table"] / built["result"].id).is_file()
    assert ROCrate(source_crates["synthetic"]).get("#build_image-image") is None


def test_a_module_dataset_is_its_record_of_the_users_datamodule(source_crates):
    report = source_crates["module"]
    crate = ROCrate(report)
    (made,) = [e for e in crate.contextual_entities if e.id.startswith("#data_module-")]
    record = made["result"]
    assert record.id.endswith("/module.json") and record["description"].startswith("record of ")
    assert json.loads((report / record.id).read_text())["params"] == {"module": "blobs:Blobs"}
    assert record in crate.get("#run-devices-1")["object"]
    # The user's DataModule module as it trained; a file edited since the run is left to its record.
    code = crate.get("files/code/blobs.py")
    assert code is not None and code in crate.get("#run-devices-1")["object"], "the crate could not build the data"
    assert (report / code.id).read_text() == "class Blobs: ...\n" and "SoftwareSourceCode" in code.type
    assert crate.get("files/code/edited.py") is None and not (report / "files/code/edited.py").exists()


@pytest.mark.parametrize("source", sorted(RAN))
def test_roc_validator_passes_the_crate_of_each_data_source(source_crates, source, validator_cache, tmp_path):
    result = validate(source_crates[source], validator_cache, tmp_path / "report.json")
    assert result["passed"], json.dumps(result["issues"], indent=1)


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


def test_each_run_action_keeps_where_its_wall_time_went(crate, provenance):
    for run, record in provenance.items():
        kept = record["timing"]["goodput"]["account"]
        said = {e["name"]: e["value"] for e in crate.get(f"#run-{run}")["result"] if e.type == "PropertyValue"}
        assert {name: said[name] for name in kept["buckets"]} == kept["buckets"]
        # A local run on the CPU: its platform cannot tell a queue wait, and no GPU was held.
        assert (said["queue_wait_s"], said["gpu_hours"]) == ("not known", 0.0) and "gpu_util_mean" not in said
        units = {e["name"]: e.get("unitText") for e in crate.get(f"#run-{run}")["result"] if e.type == "PropertyValue"}
        assert units["queue_wait_s"] is None and units["gpu_hours"] == "GPU-hours", "no unit for 'not known'"
        assert {units[name] for name in kept["buckets"]} == {"seconds"}
