"""timing.phases (snakeddp.training.phases) against what a fit is made to spend in each phase: steps, validation,
checkpoint writes and epoch-end hooks that sleep known times, run in this process on the CPU by Lightning itself."""

from __future__ import annotations

import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from snakeddp.training.phases import CHARGED, Phases
from snakeddp.training.trainer import AtomicCheckpointIO

STEP_S, VALIDATION_S, EPOCH_END_S, BATCHES, EPOCHS = 0.02, 0.1, 0.2, 5, 3
# A write far longer than the rest, so that a phase the writes were wrongly charged to would stand out above
# Lightning's own time, which a loaded machine stretches.
SAVE_S = 0.4


class SleepingModel(pl.LightningModule):
    def __init__(self, fail_at_epoch: int | None = None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.fail_at_epoch = fail_at_epoch

    def training_step(self, batch, batch_idx):
        if self.current_epoch == self.fail_at_epoch and batch_idx == 2:
            self.raised_at = time.perf_counter()
            raise RuntimeError("the model failed mid-epoch")
        time.sleep(STEP_S)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        time.sleep(VALIDATION_S)
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(BATCHES * 4, 3), torch.zeros(BATCHES * 4, 1)), batch_size=4)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(4, 3), torch.zeros(4, 1)), batch_size=4)


class SlowWrites(AtomicCheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        super().save_checkpoint(checkpoint, path, storage_options)
        started = time.perf_counter()
        time.sleep(SAVE_S)  # a slow file system's write, timed as the writer times its own
        self.seconds += time.perf_counter() - started


class SlowEpochEnd(Callback):
    """A tracker's or the model's own epoch-end work, after snakeddp's mark of the epoch's end."""

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        time.sleep(EPOCH_END_S)


def fitted(run_dir: Path, model: SleepingModel) -> tuple[dict[str, float], int]:
    writes = SlowWrites(run_dir)
    phases = Phases(writes)
    best_and_last = ModelCheckpoint(dirpath=run_dir / "checkpoints", monitor="val_loss", save_last=True)
    trainer = pl.Trainer(
        max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, plugins=[writes], default_root_dir=run_dir, num_sanity_val_steps=0,
        callbacks=[phases, SlowEpochEnd(), best_and_last],
    )  # fmt: skip
    phases.marks.update(main=time.perf_counter(), checked=time.perf_counter())
    phases.marks.update(trainer_built=time.perf_counter(), met=time.perf_counter())
    try:
        trainer.fit(model)
    except RuntimeError:
        pass
    return phases.record(), len(list((run_dir / "checkpoints").glob("*.ckpt")))


def test_each_phase_holds_what_the_fit_spent_there_and_together_they_are_the_whole(tmp_path):
    phases, saved = fitted(tmp_path, SleepingModel())
    assert saved == 2, "last.ckpt, written at each epoch's end, and the best epoch's"
    steps = EPOCHS * BATCHES
    # The checkpoint callback writes after snakeddp's epoch-end mark: its writes are checkpoints, not epoch ends.
    # At least one write an epoch; last.ckpt and an improved best make two.
    assert phases["checkpoint_s"] >= EPOCHS * SAVE_S
    writes = phases["checkpoint_s"]
    # Each phase holds at least its own sleeps, and less than them plus the writes: had the writes been charged to it,
    # it would hold both. (The bound is all the writes, not a share: CI's loaded machine once stretched Lightning's
    # own validation time by 1.3 s over three epochs.)
    assert steps * STEP_S <= phases["train_loop_s"] < steps * STEP_S + writes
    assert EPOCHS * VALIDATION_S <= phases["validation_s"] < EPOCHS * VALIDATION_S + writes
    assert EPOCHS * EPOCH_END_S <= phases["epoch_ends_s"] < EPOCHS * EPOCH_END_S + writes
    assert sum(phases[name] for name in CHARGED) == pytest.approx(phases["total_s"], abs=0.004)
    startup = ("imports_s", "checks_s", "trainer_build_s", "meeting_s", "fit_setup_s")
    assert sum(phases[name] for name in startup) == pytest.approx(phases["startup_s"], abs=0.004)


def test_a_fit_stopped_by_an_exception_is_torn_down_from_the_exception_on(tmp_path):
    model = SleepingModel(fail_at_epoch=1)
    phases, _ = fitted(tmp_path, model)
    since_raised = time.perf_counter() - model.raised_at
    # The failed epoch's two steps are training, not teardown.
    steps = BATCHES + 2
    assert steps * STEP_S <= phases["train_loop_s"]
    assert phases["epoch_ends_s"] >= EPOCH_END_S and phases["validation_s"] >= VALIDATION_S
    # Teardown starts at the exception: it holds no more than the time since the model raised it (measured here, not
    # a step's 20 ms, which Lightning's own teardown on a loaded machine can take), where a teardown begun before it
    # would hold the failed epoch's steps too. (The record is rounded to the millisecond.)
    assert phases["teardown_s"] <= since_raised + 0.0005, (phases["teardown_s"], since_raised)
    assert sum(phases[name] for name in CHARGED) == pytest.approx(phases["total_s"], abs=0.004)
