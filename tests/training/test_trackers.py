"""Trackers: MLflow (read back with MLflow's own client), TensorBoard and W&B offline, rank 0 only, no secrets."""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import os
import struct
from pathlib import Path

import pytest

from snakeddp import config
from snakeddp.config import flatten
from snakeddp.config.network import is_network_variable
from snakeddp.training.trackers import Trackers, mlflow_uri, split_credentials
from snakeddp.util.redact import recorded_environment
from snakeddp.workflow import jobenv
from tests.helpers import launch, prepare

ALL_ON = {"tensorboard": {"enabled": True}, "mlflow": {"enabled": True}, "wandb": {"enabled": True}}


@pytest.fixture
def mlflow_env(monkeypatch):
    """MLflow and the trackers set MLFLOW_* in os.environ; undo that after each test."""
    for name in (
        "MLFLOW_TRACKING_URI",
        "MLFLOW_TRACKING_USERNAME",
        "MLFLOW_TRACKING_PASSWORD",
        "MLFLOW_ALLOW_FILE_STORE",
    ):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


def tracking(**sections) -> dict:
    return config.validate({"tracking": sections})["tracking"]


def test_flatten_gives_dotted_params():
    assert flatten({"model": {"lr": 0.1, "hidden_sizes": [4]}, "seed": 1, "data": {"module_kwargs": {}}}) == {
        "model.lr": 0.1,
        "model.hidden_sizes": [4],
        "seed": 1,
    }, "an empty section is no parameter"


def test_credentials_are_split_off_the_uri():
    assert split_credentials("https://alice:s3cret@mlflow.example.org:5000/x") == (
        "https://mlflow.example.org:5000/x",
        "alice",
        "s3cret",
    )
    assert split_credentials("https://mlflow.example.org") == ("https://mlflow.example.org", None, None)


def test_default_mlflow_store_is_results_mlruns(tmp_path):
    run_dir = tmp_path / "results" / "runs" / "base"
    assert mlflow_uri(None, {}, run_dir) == f"file:{tmp_path / 'results' / 'mlruns'}"
    assert mlflow_uri(None, {"MLFLOW_TRACKING_URI": "http://h:5000"}, run_dir) == "http://h:5000"
    assert mlflow_uri("store", {"MLFLOW_TRACKING_URI": "http://h:5000"}, run_dir) == f"file:{Path('store').resolve()}"


def test_only_rank_zero_builds_trackers(tmp_path):
    trackers = Trackers(tracking(**ALL_ON), "base", tmp_path / "runs" / "base", is_main=False, env={})
    assert trackers.loggers == [] and trackers.callbacks == []
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlruns").exists()


def test_a_tracker_without_its_package_is_named_and_disabling_it_as_hinted_trains_without(tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name, *a))
    run_dir = tmp_path / "runs" / "base"
    with pytest.raises(config.ConfigError, match="wandb package is not installed.*set tracking.wandb.enabled: false"):
        Trackers(tracking(wandb={"enabled": True}), "base", run_dir, is_main=True, env={})
    trackers = Trackers(tracking(wandb={"enabled": False}), "base", run_dir, is_main=True, env={})
    assert trackers.loggers == []


def test_a_resumed_attempt_continues_the_same_mlflow_run(tmp_path, mlflow_env):
    run_dir = tmp_path / "results" / "runs" / "base"
    first = Trackers(tracking(mlflow={"enabled": True}), "base", run_dir, is_main=True, env={})
    second = Trackers(tracking(mlflow={"enabled": True}), "base", run_dir, is_main=True, env={})
    assert first.mlflow.run_id == second.mlflow.run_id
    assert json.loads((run_dir / "tracking" / "state.json").read_text()) == {"mlflow_run_id": first.mlflow.run_id}


def test_a_uri_with_credentials_never_reaches_mlflow_messages_or_records(tmp_path, mlflow_env):
    monkeypatch = mlflow_env
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    settings = tracking(mlflow={"enabled": True, "tracking_uri": "http://alice:s3cret@127.0.0.1:9/"})
    with pytest.raises(Exception) as error:  # nothing listens on port 9: MLflow's own connection error
        Trackers(settings, "base", tmp_path / "runs" / "base", is_main=True, env={})
    assert "127.0.0.1:9" in str(error.value) and "s3cret" not in str(error.value) and "alice" not in str(error.value)
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "s3cret", "credentials reach MLflow through its own variables"
    recorded = recorded_environment(
        jobenv.settings(config.validate({"tracking": settings})), network=is_network_variable
    )
    assert "s3cret" not in json.dumps(recorded) and "alice" not in json.dumps(recorded)


def wandb_records(path: Path):
    """The records of a .wandb file: W&B's header, then LevelDB-log blocks of protobuf Records."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, block, pending = 7, 32768, b""
    while position + 7 <= len(data):
        if block - position % block < 7:
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0:
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    """A 2-process run with every tracker on, started by snakeddp.launch (direct, the local default)."""
    tmp = tmp_path_factory.mktemp("tracked")
    overrides = {
        "launch": {"devices": 2},
        "trainer": {"max_epochs": 3, "early_stopping": {"enabled": False}},
        "model": {"lr": 0.01},
    }
    run_yaml, manifest, run_dir = prepare(tmp, overrides)
    run_dir = tmp / "results" / "runs" / "base"
    settings = config.validate({"tracking": ALL_ON})
    done = launch(run_yaml, manifest, run_dir, cwd=tmp, MLFLOW_TRACKING_URI="", **jobenv.settings(settings))
    (tmp / "launch.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"see {tmp / 'launch.log'}:\n{done.stderr[-6000:]}"
    return tmp, run_dir


@pytest.mark.e2e
def test_mlflow_run_holds_params_epoch_metrics_provenance_and_best_checkpoint(tracked_run, tmp_path, mlflow_env):
    from mlflow import MlflowClient

    tmp, run_dir = tracked_run
    mlflow_env.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=f"file:{tmp / 'results' / 'mlruns'}")
    experiment = client.get_experiment_by_name("snakeddp")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, "one MLflow run for a 2-process run: only rank 0 logs"
    run = runs[0]
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["tracking"]["mlflow"]["run_id"] == run.info.run_id
    assert run.info.status == "FINISHED" and run.data.tags["snakeddp.run_id"] == "base"
    assert run.data.params["model.lr"] == "0.01" and run.data.params["trainer.max_epochs"] == "3"
    assert run.data.params["launch.devices"] == "2" and run.data.params["trainer.strategy"] == "ddp"

    with (run_dir / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    history = client.get_metric_history(run.info.run_id, "val_loss")
    assert [round(m.value, 5) for m in history] == [round(float(r["val_loss"]), 5) for r in rows]
    assert len(history) == 3 and len(client.get_metric_history(run.info.run_id, "samples_per_s")) == 3

    downloaded = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path)))
    assert (downloaded / "provenance.json").read_bytes() == (run_dir / "provenance.json").read_bytes()
    (checkpoint,) = (downloaded / "checkpoints").iterdir()
    best = provenance["training"]["best_checkpoint"]
    assert checkpoint.name == Path(best["path"]).name
    assert hashlib.sha256(checkpoint.read_bytes()).hexdigest() == best["sha256"]


@pytest.mark.e2e
def test_tensorboard_events_have_every_epoch(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run_dir = tracked_run
    events = EventAccumulator(str(run_dir / "tracking" / "tensorboard"))
    events.Reload()
    assert len(events.Scalars("val_loss")) == 3 and len(events.Scalars("samples_per_s")) == 3


@pytest.mark.e2e
def test_wandb_offline_run_has_config_and_epoch_metrics(tracked_run):
    _, run_dir = tracked_run
    (path,) = glob.glob(str(run_dir / "tracking" / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = list(wandb_records(Path(path)))

    def items(entries) -> dict:
        return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in entries}

    history = [items(r.history.item) for r in records if r.HasField("history")]
    config_items = {k: v for r in records if r.HasField("config") for k, v in items(r.config.update).items()}
    assert len([h for h in history if "val_loss" in h]) == 3
    assert config_items["model.lr"] == 0.01
