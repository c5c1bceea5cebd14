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
    def setup(self, stage: str) -> None:
        time.sleep(SETUP_S)

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


def fitted(run_dir: Path, epochs: int, resume: Path | None = None) -> LiveStatus:
    checkpoints = AtomicCheckpointIO(run_dir)
    phases = Phases(checkpoints)
    live = LiveStatus(run_dir, phases)
    trainer = pl.Trainer(
        max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, plugins=[checkpoints], default_root_dir=run_dir,
        callbacks=[phases, live, ModelCheckpoint(dirpath=run_dir / "checkpoints", save_last=True)],
    )  # fmt: skip
    phases.marks.update(trainer_built=time.perf_counter(), met=time.perf_counter())
    data = SlowData()
    live.fit_called(data)
    trainer.fit(SlowStep(), datamodule=data, ckpt_path=resume, weights_only=False)
    return live


def test_each_bucket_holds_what_the_fit_was_made_to_spend_there(tmp_path):
    live = fitted(tmp_path, EPOCHS)
    said = status.read(tmp_path)
    account = said["account"]
    steps = EPOCHS * BATCHES
    assert account["productive_s"] >= steps * STEP_S and account["productive_s"] < steps * (STEP_S + FETCH_S)
    # The DataModule's setup and every batch's fetch, and not the steps.
    assert account["data_loading_s"] >= SETUP_S + steps * FETCH_S * 0.9
    assert account["data_loading_s"] < SETUP_S + steps * (FETCH_S + STEP_S)
    # One rank, no meeting: the accelerator's set-up is Lightning's own, without the DataModule's sleep.
    assert account["accelerator_init_s"] < SETUP_S
    assert account["checkpoint_save_s"] > 0 and account["checkpoint_restore_s"] == 0
    assert account["productive_at_save_s"] == account["productive_s"]  # saved at the last epoch's end
    assert (said["state"], said["step"], said["total_steps"], said["percent"]) == ("training", steps, steps, 100.0)
    assert said["epoch"] == EPOCHS and said["eta_s"] == 0.0 and said["samples_per_s"] > 0
    assert live.load is None  # on the CPU: no GPU sampled


def test_a_resumed_fit_accounts_for_the_restore_and_its_own_steps_only(tmp_path):
    fitted(tmp_path, 1)
    resumed = fitted(tmp_path, EPOCHS, resume=tmp_path / "checkpoints" / "last.ckpt")
    account = status.read(tmp_path)["account"]
    assert account["checkpoint_restore_s"] > 0 and resumed.restored_at is not None
    assert BATCHES * STEP_S <= account["productive_s"] < 2 * BATCHES * STEP_S  # the second epoch alone
    assert status.read(tmp_path)["step"] == EPOCHS * BATCHES


def fitted_without_checkpoints(run_dir: Path, model: pl.LightningModule, data: pl.LightningDataModule, **trainer):
    """What rank 0's status.json says after ``model`` is fitted on ``data`` for EPOCHS epochs (or ``max_epochs``)."""
    pl.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False,
        callbacks=[LiveStatus(run_dir, Phases(AtomicCheckpointIO(run_dir)))], **{"max_epochs": EPOCHS, **trainer},
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
    said = fitted_without_checkpoints(tmp_path, SlowValidation(), ValidatedData(), num_sanity_val_steps=0)
    loop = 4 / (STEP_S + FETCH_S)  # a batch of 4 per step and fetch
    wall = 4 * BATCHES / (BATCHES * (STEP_S + FETCH_S) + VALIDATION_S)
    assert 0.6 * loop < said["samples_per_s"] < 1.2 * loop and said["samples_per_s"] > 1.5 * wall, (said, loop, wall)


class ShortLastBatch(SlowData):
    """Each epoch's last batch holds one sample of 4 (a partition of 4,000 rows in batches of 128 ends in 32)."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(BATCHES * 4 - 3, 3), torch.zeros(BATCHES * 4 - 3, 1)), batch_size=4)


def test_samples_per_s_counts_every_batchs_samples_not_the_last_ones_times_the_steps(tmp_path):
    """The status counted the steps times the last batch's size: at an epoch's end, with a short last batch,
    `snakeddp status` said 19,882 samples/s where `snakeddp runs` and the log said 82,940."""
    said = fitted_without_checkpoints(tmp_path, SlowStep(), ShortLastBatch())
    samples = EPOCHS * (BATCHES * 4 - 3)
    loop = samples / (EPOCHS * BATCHES * STEP_S)  # at most: the steps alone, without the loader's time
    assert 0.5 * loop < said["samples_per_s"] <= loop, (said, loop)


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
