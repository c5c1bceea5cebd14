"""A rank's own time per step (snakeddp.training.owntime): its step less the time after its last gradient that
backward still took (where DDP waits for the others' gradients), on a real trainer. The DDP run itself is
tests/e2e/test_straggler.py's."""

from __future__ import annotations

import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
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


class StepStart(Callback):
    """Called before OwnTime: when each step began."""

    at = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.at = time.perf_counter()


class StepEnd(Callback):
    """Called after OwnTime: each step's (wall seconds, own seconds), its wall taken around OwnTime's."""

    def __init__(self, start: StepStart, own: OwnTime) -> None:
        self.start, self.own, self.steps = start, own, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        wall, before = time.perf_counter() - self.start.at, sum(own for _, own in self.steps)
        self.steps.append((wall, self.own.totals[1] - before))


def steps_of(model: BoringModel, tmp_path) -> list[tuple[float, float]]:
    """(wall seconds, own seconds) of each step of a fit of STEPS steps."""
    own = OwnTime()
    start = StepStart()
    end = StepEnd(start, own)
    trainer = pl.Trainer(
        max_steps=STEPS, limit_val_batches=0, callbacks=[start, own, end], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(model)
    assert own.totals[0] == len(end.steps) == STEPS
    assert own._hooks == [], "the gradient hooks are removed at teardown"
    return end.steps


def test_a_step_s_own_time_counts_its_work_and_leaves_out_the_wait_after_its_last_gradient(tmp_path):
    """Each step against its own wall time, not the sleeps plus a margin: a loaded machine stretches Lightning's
    own time in a step past any fixed margin, and it stretches a step's wall time and its own time alike."""
    torch.manual_seed(0)
    working = steps_of(Working(), tmp_path / "working")
    waiting = steps_of(Waiting(), tmp_path / "waiting")
    assert all(WORK_S <= own <= wall for wall, own in working), working
    # Without a wait, a step's own time is nearly all of it: what it leaves out is the moment from its last
    # gradient to the end of backward, and Lightning's calls around OwnTime's (microseconds a step when idle).
    assert sum(wall - own for wall, own in working) < STEPS * WAIT_S / 2, working
    assert all(WORK_S <= own <= wall - WAIT_S for wall, own in waiting), (
        f"the wait after the last gradient is not the rank's own: {waiting}"
    )
