"""Trackers: MLflow (a real `mlflow server`, read back with MLflow's own client), TensorBoard and W&B offline,
rank 0 only, no secrets; params once each, every per-epoch value at one step, the epoch from 1."""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import os
import struct
import time
from pathlib import Path

import pytest

from snakeddp import config
from snakeddp.config import flatten, parts
from snakeddp.config.network import is_network_variable
from snakeddp.errors import TrackerError
from snakeddp.run.runfile import RunFile
from snakeddp.training import trackers as trackers_module
from snakeddp.training.trackers import Trackers, epoch_values
from snakeddp.util.redact import recorded_environment
from snakeddp.workflow import jobenv
from tests.mlflow_server import free_port, serve

ALL_ON = {"tensorboard": {"enabled": True}, "mlflow": {"enabled": True}, "wandb": {"enabled": True}}


@pytest.fixture
def mlflow_env(monkeypatch):
    """MLflow and the trackers set MLFLOW_* in os.environ; undo that after each test."""
    for name in (
        "MLFLOW_TRACKING_URI",
        "MLFLOW_TRACKING_USERNAME",
        "MLFLOW_TRACKING_PASSWORD",
        "MLFLOW_ALLOW_FILE_STORE",
        *trackers_module.MLFLOW_RETRIES,
    ):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


def tracking(**sections) -> parts.Tracking:
    return parts.Tracking.of(config.validate({"tracking": sections})["tracking"])


def test_flatten_gives_dotted_params():
    assert flatten({"model": {"lr": 0.1, "hidden_sizes": [4]}, "seed": 1, "data": {"module_kwargs": {}}}) == {
        "model.lr": 0.1,
        "model.hidden_sizes": [4],
        "seed": 1,
    }, "an empty section is no parameter"


def test_a_trackers_params_leave_out_the_keys_that_mean_nothing_in_the_run():
    """A table run's config holds the generator's keys at their defaults, a synthetic run's the table's, and both the
    straggler keys with the hang watch off: as params they read as settings of the run (data.num_features: 16 beside
    a 3-column table)."""
    table = {"path": "t.parquet", "label": "y", "features": ["a", "b", "c"]}
    cfg = config.validate({"data": {"source": "table", "table": table}, "launch": {"hang_timeout": None}})
    assert cfg["data"]["num_features"] and "straggler" in cfg["launch"], "the defaults are filled in"
    params = flatten(config.applying(config.run_config(cfg)))
    assert not [key for key in params if key.removeprefix("data.") in config.sources.SYNTHETIC_ONLY], params
    assert not [key for key in params if key.startswith("launch.straggler")], params
    assert params["data.table.features"] == ["a", "b", "c"] and params["launch.hang_timeout"] is None
    # A DataModule and a model.target: no generator, no table, no built-in model's settings.
    module = {"source": "module", "module": "pkg.data:Digits"}
    own = config.validate({"data": module, "model": {"target": "pkg.models:Net", "kwargs": {"width": 8}}})
    params = flatten(config.applying(config.run_config(own)))
    assert params["model.kwargs.width"] == 8 and params["data.module"] == "pkg.data:Digits"
    assert not {"model.lr", "model.name", "model.hidden_sizes", "data.num_classes", "data.num_train_files"} & set(
        params
    ), params
    # A synthetic run keeps the generator's keys, and drops the table's defaults (data.table.val_fraction).
    synthetic = flatten(config.applying(config.run_config(config.validate({}))))
    assert all(f"data.{key}" in synthetic for key in config.sources.SYNTHETIC_ONLY), synthetic
    assert not [key for key in synthetic if key.startswith("data.table.")], synthetic


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


def test_metrics_csv_rows_become_numbers_without_counts_or_stamps():
    row = {"epoch": 2, "partition": 1, "samples": 300, "batches": 10, "val_samples": 200, "val_batches": 7}
    row |= {"val_loss": 0.5, "lr": 0.01, "samples_per_s": 900.0, "world_size": 2, "finished_at": "2026-01-01T00:00"}
    assert epoch_values(row) == {"val_loss": 0.5, "lr": 0.01, "samples_per_s": 900.0}


@pytest.mark.e2e
def test_a_resumed_attempt_continues_the_same_mlflow_run_on_the_same_axis(tmp_path, mlflow_env, mlflow_server):
    run_dir = tmp_path / "results" / "runs" / "base"
    settings = tracking(mlflow={"enabled": True, "tracking_uri": mlflow_server.uri, "experiment": "resumed"})
    first = Trackers(settings, "base", run_dir, is_main=True, env={})
    for epoch in (1, 2):
        first.mlflow.log_epoch({"val_loss": 1.0 / epoch}, epoch)
    second = Trackers(settings, "base", run_dir, is_main=True, env={})  # the next attempt's rank 0
    second.mlflow.log_epoch({"val_loss": 1.0 / 3}, 3)
    assert first.mlflow.run_id == second.mlflow.run_id
    assert json.loads((run_dir / "tracking" / "state.json").read_text()) == {"mlflow_run_id": first.mlflow.run_id}
    client = mlflow_server.client()
    (run,) = client.search_runs([client.get_experiment_by_name("resumed").experiment_id])
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")] == [1, 2, 3]


def test_an_unreachable_server_stops_rank_zero_in_one_line_without_credentials(tmp_path, mlflow_env):
    settings = tracking(mlflow={"enabled": True, "tracking_uri": f"http://alice:s3cret@127.0.0.1:{free_port()}/"})
    started = time.perf_counter()
    with pytest.raises(TrackerError) as error:
        Trackers(settings, "base", tmp_path / "runs" / "base", is_main=True, env={})
    assert time.perf_counter() - started < 5, "no MLflow retries"
    message = str(error.value)
    assert "\n" not in message and "no MLflow server answers at http://127.0.0.1:" in message and "HINT:" in message
    assert "s3cret" not in message and "alice" not in message
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "s3cret", "credentials reach MLflow through its own variables"
    recorded = recorded_environment(
        jobenv.settings(config.validate({"tracking": parts.thaw(settings)})), also=is_network_variable
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


@pytest.mark.e2e
def test_mlflow_run_holds_params_once_epoch_metrics_on_one_axis_and_provenance(tracked_run, tmp_path):
    tmp, run_dir, server = tracked_run
    client = server.client()
    runs = client.search_runs([client.get_experiment_by_name("snakeddp").experiment_id])
    assert len(runs) == 1, "one MLflow run for a 2-process run: only rank 0 logs"
    run = runs[0]
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["tracking"]["mlflow"]["run_id"] == run.info.run_id
    assert provenance["tracking"]["mlflow"]["tracking_uri"] == server.uri
    assert run.info.status == "FINISHED" and run.data.tags["snakeddp.run_id"] == "base"

    # The run config's dotted keys, each once: none of Lightning's copies of the model's (lr, hidden_sizes).
    run_config = RunFile.load(tmp / "run.yaml").config
    assert set(run.data.params) == set(flatten(config.applying(run_config)))
    assert run.data.params["model.lr"] == "0.01" and run.data.params["trainer.max_epochs"] == "3"
    assert run.data.params["launch.devices"] == "2" and run.data.params["trainer.strategy"] == "ddp"

    # Every per-epoch value at the epoch counted from 1, and nothing else (no "epoch" metric of Lightning's).
    with (run_dir / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    throughput = {"lr", "train_seconds", "epoch_seconds", "samples_per_s", "data_wait_s"}
    assert set(run.data.metrics) == {"train_loss", "val_loss", "val_acc"} | throughput
    for name in run.data.metrics:
        history = client.get_metric_history(run.info.run_id, name)
        assert sorted(m.step for m in history) == [1, 2, 3], name
        by_step = {m.step: m.value for m in history}
        assert [round(by_step[int(r["epoch"]) + 1], 5) for r in rows] == [round(float(r[name]), 5) for r in rows]

    downloaded = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path)))
    assert (downloaded / "provenance.json").read_bytes() == (run_dir / "provenance.json").read_bytes()
    (checkpoint,) = (downloaded / "checkpoints").iterdir()
    best = provenance["training"]["best_checkpoint"]
    assert checkpoint.name == Path(best["path"]).name
    assert hashlib.sha256(checkpoint.read_bytes()).hexdigest() == best["sha256"]


@pytest.mark.e2e
def test_tensorboard_events_have_every_epoch(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run_dir, _ = tracked_run
    events = EventAccumulator(str(run_dir / "tracking" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("val_loss")] == [1, 2, 3]
    assert [e.step for e in events.Scalars("samples_per_s")] == [1, 2, 3]


@pytest.mark.e2e
def test_wandb_offline_run_has_config_and_epoch_metrics(tracked_run):
    _, run_dir, _ = tracked_run
    (path,) = glob.glob(str(run_dir / "tracking" / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = list(wandb_records(Path(path)))

    def items(entries) -> dict:
        return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in entries}

    history = [items(r.history.item) for r in records if r.HasField("history")]
    config_items = {k: v for r in records if r.HasField("config") for k, v in items(r.config.update).items()}
    assert len([h for h in history if "val_loss" in h]) == 3
    assert config_items["model.lr"] == 0.01


@pytest.mark.e2e
def test_a_server_gone_mid_run_costs_no_epoch_and_gets_every_epoch_once_it_is_back(
    tmp_path, mlflow_env, capsys, monkeypatch
):
    """MLflow's client retried each request for 4 minutes and then raised in the epoch's end, before the epoch's
    checkpoint: the run lost that epoch and stopped on a 260-line traceback. A server gone mid-run is now one line,
    training goes on, and the epochs it missed reach it once it is back; one still gone at the end is one line."""
    folder = tmp_path / "server"
    folder.mkdir()
    first = serve(folder)
    server = next(first)
    settings = tracking(mlflow={"enabled": True, "tracking_uri": server.uri, "experiment": "outage"})
    run_dir = tmp_path / "results" / "runs" / "base"
    logger = Trackers(settings, "base", run_dir, is_main=True, env={}).mlflow
    logger.log_epoch({"val_loss": 1.0}, 1)
    first.close()  # the server stops
    began = time.perf_counter()
    logger.log_epoch({"val_loss": 0.5}, 2)
    assert time.perf_counter() - began < 30, "MLflow's retries are bounded"
    monkeypatch.setattr(trackers_module, "RETRY_S", 0.0)
    logger.log_epoch({"val_loss": 0.25}, 3)
    said = [line for line in capsys.readouterr().err.splitlines() if "snakeddp.train:" in line]
    assert len(said) == 1 and f"MLflow at {server.uri} stopped answering" in said[0], said
    assert "(now: 2)" in said[0] and "HINT: start the tracking server again" in said[0], said
    again = serve(folder, port=int(server.uri.rsplit(":", 1)[1]))  # the HINT: the server started again
    next(again)
    try:
        logger.log_epoch({"val_loss": 0.125}, 4)
        assert "answers again; the epochs it missed are sent" in capsys.readouterr().err
        client = server.client()
        assert [m.step for m in client.get_metric_history(logger.run_id, "val_loss")] == [1, 2, 3, 4]
        logger.finalize("success")
        assert client.get_run(logger.run_id).info.status == "FINISHED"
    finally:
        again.close()
    provenance = run_dir / "provenance.json"
    provenance.write_text("{}")
    ending = Trackers(settings, "base", run_dir, is_main=False, env={})  # built without asking the server
    ending.mlflow, ending.mlflow_uri = logger, server.uri
    assert ending.finish(provenance, None) is None
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "snakeddp.train:" in line]
    assert "did not answer as the run ended" in line and f"its run {logger.run_id} lacks provenance.json" in line
    assert "HINT: the run is complete here" in line, line
