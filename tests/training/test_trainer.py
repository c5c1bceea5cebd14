"""snakeddp.training.trainer: a run's Trainer and its typed callbacks."""

from __future__ import annotations

import pytest
from lightning.pytorch.callbacks import EarlyStopping

from snakeddp import cluster
from snakeddp import config as configuration
from snakeddp.run.layout import RunPaths
from snakeddp.training.callbacks import SampleTrace
from snakeddp.training.trainer import Callbacks, build_trainer
from tests.helpers import TINY, merged


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
    expected = ["monitor", "checkpoint", "metrics", "preemption", "hosts", "phases", "progress"]
    expected += ["early_stopping", "trace"] if optional else []
    assert present == [getattr(callbacks, name) for name in expected]
    # MonitoredMetric stops a run whose model does not log the metric before any callback reads it;
    # EpochProgress prints the row EpochMetrics has just written, so it must come after it.
    assert present[0] is callbacks.monitor
    assert present.index(callbacks.progress) > present.index(callbacks.metrics)
    assert all(callback in trainer.callbacks for callback in present)
    assert callbacks.metrics.path == paths.metrics
    assert callbacks.preemption.last_path == paths.last_checkpoint
    assert callbacks.checkpoint.dirpath == str(paths.checkpoints)
