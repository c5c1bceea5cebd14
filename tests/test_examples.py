"""examples/tabular: a CSV made by a script and a LightningModule of its own, trained by config alone."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pytest
import yaml

from snakeddp import config
from snakeddp.data.partitions import load_manifest, read_partition
from tests.helpers import REPO, Workflow, subprocess_env

pytestmark = pytest.mark.dev_venv  # the example's trackers
# The example's one run: its experiment's name in front of its sweep point.
RUN = "tabular--devices-2"


def checkout_with_table(tmp):
    """The example's files, the default config and the example's CSV, as a user has them in a checkout."""
    shutil.copytree(REPO / "examples", tmp / "examples")
    (tmp / "config").mkdir()
    shutil.copy(REPO / "config" / "config.yaml", tmp / "config" / "config.yaml")
    made = subprocess.run(
        [sys.executable, "examples/tabular/make_table.py", "data/churn.csv"], cwd=tmp, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The example as a user runs it from a checkout: the default config plus the example's config."""
    tmp = tmp_path_factory.mktemp("example")
    checkout_with_table(tmp)
    workflow = Workflow(tmp)
    workflow.configfile = tmp / "examples" / "tabular" / "config.yaml"
    env = subprocess_env(MLFLOW_TRACKING_URI="")
    workflow.run(env=env)
    return workflow, env


@pytest.mark.e2e
def test_example_trains_its_own_model_on_its_csv_through_the_pipeline(example):
    workflow, _ = example
    run_dir = workflow.directory / "results" / "runs" / RUN
    record = json.loads((run_dir / "provenance.json").read_text())
    assert [u["target"] for u in record["user_code"]] == ["examples.tabular.model:TabularNet"]
    assert record["data"]["dataset"].startswith("churn-") and record["data"]["partitions"] == 4
    assert sum(record["data"]["records"].values()) == 20_000
    assert record["launch"]["world_size"] == 2
    assert (workflow.directory / "results" / "report" / "runs.csv").is_file()
    assert (run_dir / "tracking" / "tensorboard").is_dir() and record["tracking"]["mlflow"]["run_id"]


@pytest.mark.e2e
def test_the_crate_of_a_table_sweep_names_its_ingestion(example):
    workflow, _ = example
    metadata = json.loads((workflow.directory / "results" / "report" / "ro-crate-metadata.json").read_text())
    names = {entity.get("name") for entity in metadata["@graph"] if entity["@type"] == "HowToStep"}
    assert {"data_table", "data_manifest", "train", "report"} <= names
    assert not names & {"data_module", "data_partition", "data_val"}  # the table's ingestion writes its files
    (ingest,) = [e for e in metadata["@graph"] if e["@id"].startswith("#data_table-")]
    assert ingest["description"].endswith("; from data/churn.csv")


@pytest.mark.e2e
def test_the_run_leaves_the_users_config_files_as_they_were_and_crates_both(example):
    """The default config and the example's are both named config.yaml: the report's crate keeps
    one copy of each, and placing the second never writes into the first (a hard link once did)."""
    workflow, _ = example
    for name in ("config/config.yaml", "examples/tabular/config.yaml"):
        assert (workflow.directory / name).read_text() == (REPO / name).read_text(), name
    crated = workflow.directory / "results" / "report" / "files" / "workflow" / "config"
    names = {p.name for p in crated.iterdir()}
    assert {"1-config.yaml", "2-config.yaml"} <= names and "config.yaml" not in names, names
    originals = {(REPO / name).read_text() for name in ("config/config.yaml", "examples/tabular/config.yaml")}
    assert {(crated / name).read_text() for name in ("1-config.yaml", "2-config.yaml")} == originals


def test_the_examples_runs_are_not_the_default_configs():
    """Run after the default pipeline in the same checkout, the example trains beside its runs, not over them
    (it once trained into results/runs/devices-2, and the default's next run trained that one again)."""
    default = config.load(REPO / "config" / "config.yaml")
    example = config.validate(
        {**default, **yaml.safe_load((REPO / "examples" / "tabular" / "config.yaml").read_text())}
    )
    assert list(config.expand_sweep(example)) == [RUN]
    assert RUN not in config.expand_sweep(default)


@pytest.mark.e2e
def test_example_beats_a_constant_predictor_on_validation(example):
    workflow, _ = example
    record = json.loads((workflow.directory / "results" / "runs" / RUN / "provenance.json").read_text())
    manifest_path = workflow.directory / record["data"]["manifest"]
    val = load_manifest(manifest_path)["val"]
    labels = read_partition(manifest_path.parent / val["file"], val).labels.numpy()
    positive = float(labels.mean())
    constant_accuracy = max(positive, 1 - positive)
    constant_loss = -(positive * math.log(positive) + (1 - positive) * math.log(1 - positive))
    training = record["training"]
    assert training["best_val_acc"] > constant_accuracy + 0.05, (training["best_val_acc"], constant_accuracy)
    assert training["best_val_loss"] < constant_loss - 0.05, (training["best_val_loss"], constant_loss)


@pytest.mark.e2e
def test_trackers_and_network_settings_never_rerun_the_example(example, tmp_path):
    """An overlay that only turns on a tracker and sets NCCL_DEBUG trains nothing again; only the
    report, whose crate lists the config files given, is rebuilt."""
    workflow, _ = example
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("tracking:\n  wandb: {enabled: true}\nnetwork:\n  env: {NCCL_DEBUG: INFO}\n")
    assert workflow.planned_jobs() == {}
    planned = workflow.planned_jobs("--configfile", str(workflow.configfile), str(overlay))
    assert planned == {"report": 1, "all": 1}


@pytest.mark.e2e
def test_the_example_trains_its_model_written_as_lightningcli_writes_it_and_that_is_the_same_run(tmp_path):
    """model: {class_path, init_args} (LightningCLI --print_config's form) trains the example's model and is
    recorded as model.target + model.kwargs; the config written that way plans nothing to train again."""
    checkout_with_table(tmp_path)
    settings = yaml.safe_load((REPO / "examples" / "tabular" / "config.yaml").read_text())
    del settings["tracking"]
    settings["trainer"]["max_epochs"] = 2
    settings["sweep"] = {"launch.devices": [1]}
    ours = settings["model"]
    assert ours["target"] == "examples.tabular.model:TabularNet"
    lightning = {"class_path": "examples.tabular.model.TabularNet", "init_args": ours["kwargs"]}
    workflow = Workflow(tmp_path)
    workflow.configfile = tmp_path / "lightning.yaml"
    workflow.configfile.write_text(yaml.safe_dump({**settings, "model": lightning}, sort_keys=False))
    workflow.run(env=subprocess_env(MLFLOW_TRACKING_URI=""))
    record = json.loads((tmp_path / "results" / "runs" / "tabular--devices-1" / "provenance.json").read_text())
    assert [u["target"] for u in record["user_code"]] == [ours["target"]]
    assert (
        record["config"]["model"]["target"] == ours["target"] and record["config"]["model"]["kwargs"] == ours["kwargs"]
    )
    assert "class_path" not in record["config"]["model"] and record["training"]["epochs_completed"] == 2
    workflow.configfile = tmp_path / "ours.yaml"
    workflow.configfile.write_text(yaml.safe_dump(settings, sort_keys=False))
    # Only the report, whose crate lists the config files given, is made again.
    assert set(workflow.planned_jobs()) <= {"report", "all"}
