"""provenance.json against its JSON Schema: what the pipeline writes passes, gaps and secrets fail."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from snakeddp.environment import sbom
from snakeddp.provenance.schema import ProvenanceError, problems, validate, validate_file
from snakeddp.util.hashing import sha256_file
from tests.helpers import BY_VALUE_SECRETS, QUOTED_SECRET, SECRET_VALUES, SECRETS, assert_valid_provenance, leaked

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def record(sweep_workflow) -> dict:
    return json.loads((sweep_workflow.directory / "results/runs/devices-2/provenance.json").read_text())


def test_every_provenance_of_the_sweep_matches_the_schema(sweep_workflow):
    records = assert_valid_provenance(sweep_workflow.directory / "results")
    assert sorted(r["run_id"] for r in records) == ["devices-1", "devices-2"]


def test_record_has_the_facts_design_asks_for(record):
    assert record["code"]["commit"] and record["code"]["dirty"] in (True, False)
    assert record["environment"]["environment_hash"] and record["environment"]["lock_sha256"]
    assert {"python", "torch", "lightning", "cuda", "cudnn", "nccl"} <= set(record["environment"])
    assert [r["rank"] for r in record["launch"]["ranks"]] == [0, 1]
    assert record["launch"]["job_id"] and record["launch"]["world_size"] == 2
    best = record["training"]["best_checkpoint"]
    assert best["metric"] == "val_loss" and best["path"] in [c["path"] for c in record["training"]["checkpoints"]]
    assert record["timing"]["started_at"] <= record["timing"]["finished_at"]


def test_timing_phases_add_up_to_the_process_wall_time(record):
    phases = record["timing"]["phases"]
    startup_parts = ("imports_s", "checks_s", "trainer_build_s", "meeting_s", "fit_setup_s")
    assert phases["startup_s"] == pytest.approx(sum(phases[k] for k in startup_parts), abs=0.004)
    # Forked from the workflow's warm process, a rank finds torch and Lightning imported (snakeddp.warm).
    assert record["launch"]["job_start"] == "warm" and record["launch"]["rank_start"] == "warm"
    # A rank that imported them itself would have spent 5-7 s of CPU on it (bench/history.md); a forked one spends
    # its own code's imports and a fork's page faults, 0.12 s at a load of 5 on 2 cores: 1 s, not 0.3 s, leaves a
    # loaded machine room without letting a cold import by.
    assert 0 <= phases["imports_s"] < 1.0, "the warm process imported torch and Lightning once, for every rank"
    assert phases["checkpoint_s"] > 0 and phases["validation_s"] > 0 and phases["train_loop_s"] > 0
    assert phases["epoch_ends_s"] > 0, "the checkpoint callback's hooks and the next epoch's loaders, between epochs"
    # Each moment is charged to one phase: they add up to the whole, to the rounding of six figures to 1 ms.
    parts = ("startup_s", "train_loop_s", "validation_s", "checkpoint_s", "epoch_ends_s", "teardown_s")
    assert sum(phases[k] for k in parts) == pytest.approx(phases["total_s"], abs=0.004)


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda r: r["training"]["best_checkpoint"].pop("sha256"), "training.best_checkpoint"),
        (lambda r: r["code"].pop("commit"), "code"),
        (lambda r: r["data"].update(manifest_sha256="not-a-hash"), "data.manifest_sha256"),
        (lambda r: r["launch"]["variables"].update(AZURE_CLIENT_SECRET="x"), "launch.variables"),
        (lambda r: r["launch"]["variables"].update(NCCL_URL="https://u:p@host/"), "launch.variables.NCCL_URL"),
        (lambda r: r["timing"].update(started_at="yesterday"), "timing.started_at"),
        (lambda r: r["timing"]["phases"].update(fit_setup_s=-1), "timing.phases.fit_setup_s"),
        (lambda r: r.update(extra=1), "(top level)"),
    ],
)
def test_schema_rejects_gaps_and_secrets(record, edit, key):
    broken = copy.deepcopy(record)
    edit(broken)
    found = problems(broken)
    assert any(line.startswith(f"{key}:") for line in found), found
    with pytest.raises(ProvenanceError, match="HINT"):
        validate(broken)


def test_validate_file_names_an_unreadable_file(tmp_path: Path):
    path = tmp_path / "provenance.json"
    path.write_text("{not json")
    with pytest.raises(ProvenanceError, match="cannot read provenance"):
        validate_file(path)


def test_secret_values_never_reach_results_logs_metadata_or_the_terminal(sweep_workflow, record):
    """Every secret, those repeated under harmless keys (a storage key, an environment credential, a quoted
    secret) included, in every quoting: by value, not by key."""
    config = yaml.safe_load((sweep_workflow.directory / "config.yaml").read_text())
    assert config["spark"]["conf"]["spark.app.comment"] == QUOTED_SECRET, "the harmless key holds the secret"
    found = []
    for top in ("results", "logs", ".snakemake"):
        for path in (sweep_workflow.directory / top).rglob("*"):
            if path.is_file():
                found += [f"{path}: {value}" for value in leaked(path.read_bytes(), SECRET_VALUES)]
    terminal = sweep_workflow.first_run.stdout + sweep_workflow.first_run.stderr
    found += [f"terminal: {value}" for value in leaked(terminal, SECRET_VALUES)]
    assert not found
    resolved = sweep_workflow.directory / "results/report/files/workflow/config.resolved.yaml"
    masked = yaml.safe_load(resolved.read_text())["spark"]["conf"]
    assert {key: masked[key] for key in BY_VALUE_SECRETS} == dict.fromkeys(BY_VALUE_SECRETS, "***")
    # Recorded: the network variables (a family every rank is given), credentials masked; the
    # config's network.env is recorded as the ranks saw it.
    variables = record["launch"]["variables"]
    assert variables["NCCL_PROXY_URL"] == "https://***@proxy.invalid:3128/"
    assert variables["UCX_PROXY_URL"] == "https://***@proxy.invalid/"
    # Not recorded: what provenance does not need (the allow-list), and tokens under any name.
    assert not {"SLURM_SPOOL_URL", "SLURM_JWT", "NCCL_COLLNET_BLOB"} & set(variables)
    assert not (set(SECRETS) - {"NCCL_PROXY_URL"}) & set(variables)


def test_every_environment_record_and_the_crate_hold_an_sbom_matching_the_installed_files(sweep_workflow):
    """Each stage's record names its CycloneDX SBOM by sha256, the crate carries it, the report lists the
    licences the models were trained with, and every digest matches the files installed in this venv."""
    envs = sweep_workflow.directory / "results/envs"
    boms = {}
    for stage in ("data", "train", "report"):
        record = json.loads((envs / f"{stage}.json").read_text())
        path = envs / record["sbom"]["file"]
        assert path.name == f"{stage}.cdx.json" and sha256_file(path) == record["sbom"]["sha256"]
        boms[stage] = json.loads(path.read_text())
    crate = sweep_workflow.directory / "results/report"
    assert (crate / "files/envs/train.cdx.json").read_bytes() == (envs / "train.cdx.json").read_bytes()
    metadata = json.loads((crate / "ro-crate-metadata.json").read_text())
    (entity,) = [e for e in metadata["@graph"] if e["@id"] == "files/envs/train.cdx.json"]
    assert entity["encodingFormat"] == "application/vnd.cyclonedx+json"
    page = (crate / "report.html").read_text()
    assert "Licences of what the models were trained with" in page and "Apache-2.0" in page
    # The three stages ran in this venv: one set of digests, checked against every installed file once.
    digests = [{c["name"]: c["hashes"] for c in bom["components"]} for bom in boms.values()]
    assert digests[0] == digests[1] == digests[2]
    checked, differences = sbom.check(boms["train"])
    assert checked == len(boms["train"]["components"]) and differences == []
