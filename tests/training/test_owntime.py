"""A rank's own time per step (snakeddp.training.owntime): its step less the time after its last gradient that
backward still took (where DDP waits for the others' gradients), on a real trainer. The DDP run itself is
tests/e2e/test_straggler.py's."""

from __future__ import annotations

import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.demos.boring_classes import BoringModel

from snakeddp.training.owntime import OwnTime

STEPS = 8
WORK_S = 0.03  # in training_step: the rank's own
WAIT_S = 0.05  # after the last gradient, inside backward: the all-reduce's wait


class Working(BoringModel):
    def training_step(self, batch, batch_idx):
        time.sleep(WORK_S)
        return super().training_step(batch, batch_idx)


class Waiting(Working):
    def backward(self, loss, *args, **kwargs):
        loss.backward(*args, **kwargs)
        time.sleep(WAIT_S)  # where DDP's backward waits for the all-reduce, after every gradient is accumulated


def own_step_s(model: BoringModel, tmp_path) -> tuple[float, float]:
    """(own seconds per step, wall seconds per step) of a fit of STEPS steps."""
    own = OwnTime()
    trainer = pl.Trainer(
        max_steps=STEPS, limit_val_batches=0, callbacks=[own], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu",
    )  # fmt: skip
    started = time.perf_counter()
    trainer.fit(model)
    wall = time.perf_counter() - started
    steps, seconds = own.totals
    assert steps == STEPS
    assert own._hooks == [], "the gradient hooks are removed at teardown"
    return seconds / steps, wall / steps


def test_a_step_s_own_time_counts_its_work_and_leaves_out_the_wait_after_its_last_gradient(tmp_path):
    torch.manual_seed(0)
    working, _ = own_step_s(Working(), tmp_path / "working")
    waiting, wall = own_step_s(Waiting(), tmp_path / "waiting")
    assert WORK_S <= working < WORK_S + WAIT_S / 2
    assert WORK_S <= waiting < WORK_S + WAIT_S / 2, "the wait after the last gradient is not the rank's own"
    assert wall >= WORK_S + WAIT_S
