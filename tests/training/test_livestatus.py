"""Rank 0's account of a try (snakeddp.training.livestatus) against what a fit is made to spend: a DataModule
whose setup and batches sleep known times, a step that sleeps, a checkpoint each epoch, and a resumed fit; run
in this process on the CPU by Lightning itself (one rank, no meeting)."""

from __future__ import annotations

import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, Dataset, TensorDataset

from snakeddp.run import status
from snakeddp.training.callbacks import Preempted
from snakeddp.training.livestatus import LiveStatus
from snakeddp.training.phases import Phases
from snakeddp.training.trainer import AtomicCheckpointIO

SETUP_S, FETCH_S, STEP_S, BATCHES, EPOCHS = 0.4, 0.05, 0.03, 10, 2


class SlowToFetch(Dataset):
    def __len__(self) -> int:
        return BATCHES * 4

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if index % 4 == 0:  # once a batch of 4
            time.sleep(FETCH_S)
        return torch.ones(3), torch.zeros(1)


class SlowData(pl.LightningDataModule):
    took = 0.0  # its setup's seconds, by its own clock

    def setup(self, stage: str) -> None:
        began = time.perf_counter()
        time.sleep(SETUP_S)
        self.took = time.perf_counter() - began

    def train_dataloader(self) -> DataLoader:
        return DataLoader(SlowToFetch(), batch_size=4)


class SlowStep(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        time.sleep(STEP_S)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Clock(pl.Callback):
    """The test's own clock of a fit, called after every other callback: when ``fit`` was called (``called``,
    set by the caller), when Lightning had set the fit up, and its training's start and end."""

    called = setup_at = train_start = train_end = 0.0

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.setup_at = time.perf_counter()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.train_start = time.perf_counter()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.train_end = time.perf_counter()


def fitted(run_dir: Path, epochs: int, resume: Path | None = None) -> tuple[LiveStatus, SlowData, Clock]:
    checkpoints = AtomicCheckpointIO(run_dir)
    phases = Phases(checkpoints)
    live = LiveStatus(run_dir, phases)
    clock = Clock()
    trainer = pl.Trainer(
        max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, plugins=[checkpoints], default_root_dir=run_dir,
        callbacks=[phases, live, ModelCheckpoint(dirpath=run_dir / "checkpoints", save_last=True), clock],
    )  # fmt: skip
    phases.marks.update(trainer_built=time.perf_counter(), met=time.perf_counter())
    data = SlowData()
    clock.called = time.perf_counter()
    live.fit_called(data)
    trainer.fit(SlowStep(), datamodule=data, ckpt_path=resume, weights_only=False)
    return live, data, clock


# Each bucket is rounded to the millisecond.
ROUNDING_S = 0.002


def test_each_bucket_holds_what_the_fit_was_made_to_spend_there(tmp_path):
    live, data, clock = fitted(tmp_path, EPOCHS)
    said = status.read(tmp_path)
    account = said["account"]
    steps = EPOCHS * BATCHES
    assert account["productive_s"] >= steps * STEP_S
    # The DataModule's setup and every batch's fetch.
    assert account["data_loading_s"] >= SETUP_S + steps * FETCH_S * 0.9
    # Upper bounds from this fit's own clock, not from the sleeps plus a margin, which a loaded machine's stretch of
    # Lightning's own time exceeds (tests/training/test_phases.py's failed on CI so). The buckets charge each moment
    # once: had the fetches also been charged to the steps, or the steps to data loading, the buckets of the
    # training loop would hold more than its wall time, by a second (the fetches) or 0.6 s (the steps).
    in_loop = account["data_loading_s"] - data.took  # the DataModule's setup, before the loop, by its own clock
    loop = account["productive_s"] + in_loop + account["checkpoint_save_s"]
    assert loop <= clock.train_end - clock.train_start + ROUNDING_S, (account, clock.__dict__)
    # One rank, no meeting: the accelerator's set-up is Lightning's own, without the DataModule's setup, which falls
    # in between (fit_called): charged to both, they would hold more than fit's own set-up, by SETUP_S.
    set_up = clock.setup_at - clock.called
    assert account["accelerator_init_s"] + data.took <= set_up + ROUNDING_S, (account, data.took, set_up)
    assert account["checkpoint_save_s"] > 0 and account["checkpoint_restore_s"] == 0
    assert account["productive_at_save_s"] == account["productive_s"]  # saved at the last epoch's end
    assert (said["state"], said["step"], said["total_steps"], said["percent"]) == ("training", steps, steps, 100.0)
    assert said["epoch"] == EPOCHS and said["eta_s"] == 0.0 and said["samples_per_s"] > 0
    assert live.load is None  # on the CPU: no GPU sampled


def test_a_resumed_fit_accounts_for_the_restore_and_its_own_steps_only(tmp_path):
    fitted(tmp_path, 1)
    first = status.read(tmp_path)["account"]["productive_s"]
    resumed, _, _ = fitted(tmp_path, EPOCHS, resume=tmp_path / "checkpoints" / "last.ckpt")
    account = status.read(tmp_path)["account"]
    assert account["checkpoint_restore_s"] > 0 and resumed.restored_at is not None
    # The second epoch alone: had the first fit's steps been counted again, it would hold the first fit's
    # productive seconds and its own epoch's sleeps. (Bounded by the first fit's measure, not by the sleeps of two
    # epochs: a loaded machine stretches Lightning's own time per step past 0.3 s in ten steps.)
    assert BATCHES * STEP_S <= account["productive_s"] < first + BATCHES * STEP_S, (first, account)
    assert status.read(tmp_path)["step"] == EPOCHS * BATCHES


def fitted_without_checkpoints(
    run_dir: Path, model: pl.LightningModule, data: pl.LightningDataModule, clock: Clock | None = None, **trainer
):
    """What rank 0's status.json says after ``model`` is fitted on ``data`` for EPOCHS epochs (or ``max_epochs``),
    timed by ``clock`` where one is given."""
    pl.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False,
        callbacks=[LiveStatus(run_dir, Phases(AtomicCheckpointIO(run_dir))), *([clock] if clock else [])],
        **{"max_epochs": EPOCHS, **trainer},
    ).fit(model, datamodule=data)  # fmt: skip
    return status.read(run_dir)


class GrowingData(pl.LightningDataModule):
    """Each epoch a partition of its own, one batch more than the last (a table's partitions differ by rows)."""

    def train_dataloader(self) -> DataLoader:
        epoch = self.trainer.current_epoch
        return DataLoader(
            TensorDataset(torch.ones((BATCHES + epoch) * 4, 3), torch.zeros((BATCHES + epoch) * 4, 1)), batch_size=4
        )


def test_the_steps_to_take_follow_each_epochs_own_partition(tmp_path):
    """Lightning's estimate counts the first epoch's batches for every epoch: the run said 21/20 at its end."""
    said = fitted_without_checkpoints(tmp_path, SlowStep(), GrowingData(), reload_dataloaders_every_n_epochs=1)
    steps = EPOCHS * BATCHES + sum(range(EPOCHS))
    assert (said["step"], said["total_steps"], said["percent"]) == (steps, steps, 100.0), said


class SlowValidation(SlowStep):
    def validation_step(self, batch, batch_idx):
        time.sleep(VALIDATION_S)


class ValidatedData(SlowData):
    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(4, 3), torch.zeros(4, 1)), batch_size=4)


VALIDATION_S = 1.0


def test_samples_per_s_is_the_training_loops_as_the_report_times_it(tmp_path):
    """The wall clock holds validation (a second an epoch here), which the ETA counts and samples/s does not: the
    status said a seventh of `snakeddp runs`' samples/s for a run of small batches."""
    clock = Clock()
    said = fitted_without_checkpoints(tmp_path, SlowValidation(), ValidatedData(), clock, num_sanity_val_steps=0)
    steps = EPOCHS * BATCHES
    # The seconds the rate was taken over: at least every step's and fetch's sleep, and no more than training's
    # wall time without validation's sleeps. (Bounds from this fit's own clock: a loaded machine stretched
    # Lightning's own time past fixed margins.) Over the wall clock, it would have held validation's 2 s too.
    seconds = steps * 4 / said["samples_per_s"]  # a batch of 4 per step
    trained = clock.train_end - clock.train_start
    assert steps * (STEP_S + FETCH_S) <= seconds <= trained - EPOCHS * VALIDATION_S, (said, seconds, trained)


class ShortLastBatch(SlowData):
    """Each epoch's last batch holds one sample of 4 (a partition of 4,000 rows in batches of 128 ends in 32)."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(BATCHES * 4 - 3, 3), torch.zeros(BATCHES * 4 - 3, 1)), batch_size=4)


def test_samples_per_s_counts_every_batchs_samples_not_the_last_ones_times_the_steps(tmp_path):
    """The status counted the steps times the last batch's size: at an epoch's end, with a short last batch,
    `snakeddp status` said 19,882 samples/s where `snakeddp runs` and the log said 82,940."""
    clock = Clock()
    said = fitted_without_checkpoints(tmp_path, SlowStep(), ShortLastBatch(), clock)
    samples = EPOCHS * (BATCHES * 4 - 3)
    # The seconds the rate was taken over, were every sample counted: at least the steps' sleeps, at most training's
    # wall time. Counted as the steps times the last batch's one sample, they would be 3.7 times the loop's.
    seconds = samples / said["samples_per_s"]
    trained = clock.train_end - clock.train_start
    assert EPOCHS * BATCHES * STEP_S <= seconds <= trained, (said, seconds, trained)


class StopsAfterTwoEpochs(SlowStep):
    """Stops the fit at its second epoch's end, as early stopping does."""

    def on_train_epoch_end(self) -> None:
        if self.current_epoch == 1:
            self.trainer.should_stop = True


def test_an_early_stopped_fit_ends_at_the_epoch_it_trained_last(tmp_path):
    """Lightning's current_epoch counts the epochs completed once the fit ends: a run early stopped after 18 epochs
    said 19/300 in `snakeddp status` (`snakeddp runs`: 18/300)."""
    said = fitted_without_checkpoints(tmp_path, StopsAfterTwoEpochs(), SlowData(), max_epochs=5)
    assert (said["epoch"], said["max_epochs"], said["step"]) == (2, 5, 2 * BATCHES), said


class PreemptedAt(pl.Callback):
    """Stops the fit as snakeddp's Preemption does, at ``step`` of the second epoch, after saving last.ckpt."""

    def __init__(self, step: int, checkpoint: Path) -> None:
        self.step, self.checkpoint = step, checkpoint

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise Preempted(f"stopping after step {self.step}")

    def on_exception(self, trainer, pl_module, exception) -> None:
        trainer.save_checkpoint(self.checkpoint, weights_only=False)


def test_a_preempted_fit_says_the_step_and_epoch_it_stopped_at_and_its_save(tmp_path):
    """The status kept rank 0's last post, up to POST_S before the stop: a run stopped in epoch 164/400 at step
    5,236 (tries.json, the log) said 163/400, step 5,216 in `snakeddp status`, and its account missed the save."""
    checkpoints = AtomicCheckpointIO(tmp_path)
    phases = Phases(checkpoints)
    live = LiveStatus(tmp_path, phases)
    trainer = pl.Trainer(
        max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, plugins=[checkpoints],
        callbacks=[phases, PreemptedAt(BATCHES + 3, tmp_path / "last.ckpt"), live],
    )  # fmt: skip
    with pytest.raises(Preempted):
        trainer.fit(SlowStep(), datamodule=SlowData())
    said = status.read(tmp_path)
    assert (said["epoch"], said["step"]) == (2, BATCHES + 3), said
    assert said["account"]["productive_at_save_s"] == said["account"]["productive_s"] > 0, said
