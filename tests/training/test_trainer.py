"""snakeddp.training.trainer: a run's Trainer and its typed callbacks."""

from __future__ import annotations

import os
import socket

import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping

from snakeddp import cluster
from snakeddp import config as configuration
from snakeddp.config import parts
from snakeddp.run.layout import RunPaths
from snakeddp.training.callbacks import SampleTrace
from snakeddp.training.trainer import Callbacks
from snakeddp.training.trainer import build_trainer as build_from_parts
from snakeddp.util import gpus
from tests.helpers import TINY, launch, merged, prepare


def build_trainer(cfg, launcher, layout, run_dir):
    """build_trainer on a run config's trainer and launch parts, as snakeddp.train builds them."""
    return build_from_parts(parts.Trainer.of(cfg["trainer"]), parts.Launch.of(cfg["launch"]), launcher, layout, run_dir)


@pytest.mark.parametrize("optional", [False, True], ids=["required-only", "with-optional"])
def test_build_trainer_hands_its_callbacks_over_typed_and_in_order(tmp_path, optional):
    overrides = {
        "launch": {"accelerator": "cpu"},
        "trainer": {"early_stopping": {"enabled": optional}, "trace_samples": optional},
    }
    cfg = configuration.run_config(configuration.validate(merged(TINY, overrides)))
    launcher, layout = cluster.resolve("spawn", {}, devices=1)
    paths = RunPaths(tmp_path / "runs" / "base")

    trainer, callbacks = build_trainer(cfg, launcher, layout, paths.folder)

    assert isinstance(callbacks, Callbacks)
    assert isinstance(callbacks.early_stopping, EarlyStopping) is optional
    assert isinstance(callbacks.trace, SampleTrace) is optional
    present = callbacks.all()
    expected = ["held", "monitor", "checkpoint", "metrics", "preemption", "hosts", "phases", "progress", "live"]
    expected += ["early_stopping", "trace"] if optional else []
    assert present == [getattr(callbacks, name) for name in expected]
    # HeldStops holds a stop from the start of an epoch's end hooks (Lightning's first callback) until the
    # checkpoint callback, which Lightning calls last, has saved; MonitoredMetric stops a run whose model does not
    # log the metric before any callback reads it; EpochProgress prints the row EpochMetrics has just written, so
    # it must come after it.
    assert trainer.callbacks[0] is callbacks.held and callbacks.checkpoint.held is callbacks.held
    assert trainer.callbacks.index(callbacks.checkpoint) > trainer.callbacks.index(callbacks.progress)
    assert present[1] is callbacks.monitor
    assert present.index(callbacks.progress) > present.index(callbacks.metrics)
    assert all(callback in trainer.callbacks for callback in present)
    assert callbacks.metrics.path == paths.metrics
    assert callbacks.preemption.last_path == paths.last_checkpoint
    assert callbacks.checkpoint.dirpath == str(paths.checkpoints)


def test_deterministic_mode_reaches_torch_and_stays_out_of_a_default_run_config(tmp_path, monkeypatch):
    launcher, layout = cluster.resolve("spawn", {}, devices=1)
    default = configuration.run_config(configuration.validate(merged(TINY, {})))
    assert "deterministic" not in default["trainer"] and "matmul_precision" not in default["trainer"]
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        build_trainer(default, launcher, layout, tmp_path / "default")
        assert not torch.are_deterministic_algorithms_enabled() and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
        asked = configuration.run_config(configuration.validate(merged(TINY, {"trainer": {"deterministic": True}})))
        build_trainer(asked, launcher, layout, tmp_path / "asked")
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8", "set before any CUDA handle exists"
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.e2e
def test_gpus_asked_for_where_torch_sees_none_stop_in_one_line_naming_node_driver_and_build(tmp_path):
    run_yaml, manifest, run_dir = prepare(tmp_path, {"launch": {"accelerator": "gpu", "devices": 2}})
    done = launch(run_yaml, manifest, run_dir, cwd=tmp_path)
    assert done.returncode != 0 and not (run_dir / "provenance.json").exists()
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "torch sees no CUDA device" in line]
    assert len(lines) == 1, done.stdout + done.stderr
    # As the installed torch is built: a CPU build says so; a CUDA build's rank (a GPU host, or the stand-ins'
    # CUDA build) finds the GPUs hidden from the processes a test starts (CUDA_VISIBLE_DEVICES='').
    driver = gpus.driver_version() or "none loaded"
    built = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU build"
    assert f"on {socket.gethostname()} (NVIDIA driver: {driver}; torch {torch.__version__}, {built}" in lines[0]
    why = (
        "torch is a CPU build"
        if torch.version.cuda is None
        else "CUDA_VISIBLE_DEVICES hides the GPUs"
        if gpus.installed()
        else "no GPU is allocated to this process"
    )
    assert why in lines[0] and "HINT:" in lines[0], lines[0]
