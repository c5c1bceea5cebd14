"""How often the ranks agree on a preemption signal (about once a second, whatever the step costs),
and where they stop: never after an epoch's last step, which Lightning would resume from as from a
finished epoch (the last tests, with a real Trainer).

A fake clock stands in for time.perf_counter, so the tests check the rule (the next check comes
CHECK_EVERY_S of the slowest rank's steps later), not how busy the test machine is.

The agreement itself (one all-reduce across real ranks, every rank stopping at the same step)
is tested end to end in tests/e2e/test_training.py; here a one-rank "world" of two shows the
schedule: max over one rank's values is those values.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch import Callback
from lightning.pytorch.demos.boring_classes import BoringModel

from snakeddp.compat.lightning import batches_done
from snakeddp.data.module import ResumableLoader, ShardedBatchSampler
from snakeddp.training import callbacks
from snakeddp.training.callbacks import Preempted, Preemption


class OneRankStrategy:
    def reduce(self, tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
        assert reduce_op == "max"
        return tensor


class Clock:
    """time.perf_counter for the callback: advanced by the steps, never by the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(callbacks.time, "perf_counter", fake)
    return fake


def steps(callback: Preemption, clock: Clock, count: int, step_s: float) -> list[int]:
    """Run ``count`` steps of ``step_s`` seconds; return the steps after which the ranks agreed."""
    progress = SimpleNamespace(is_last_batch=False, current=SimpleNamespace(ready=0))  # an endless epoch
    trainer = SimpleNamespace(
        world_size=2, strategy=OneRankStrategy(), global_step=0, num_training_batches=float("inf"),
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=progress)),
    )  # fmt: skip
    module = SimpleNamespace(device=torch.device("cpu"))
    agreed = []
    for _ in range(count):
        clock.now += step_s
        trainer.global_step += 1
        before = callback.checks
        callback.on_train_batch_end(trainer, module, None, None, 0)
        if callback.checks > before:
            agreed.append(trainer.global_step)
    return agreed


@pytest.fixture
def preemption(tmp_path, clock):
    callback = Preemption(["SIGUSR1"], tmp_path / "last.ckpt")
    callback._checked_at = clock()  # what on_train_start does
    return callback


def test_cheap_steps_agree_about_once_a_second_not_every_step(preemption, clock):
    # 1/64 s steps (exact in binary): after the first step, one agreement every 64 steps = 1 s.
    assert steps(preemption, clock, 150, 1 / 64) == [1, 65, 129]


def test_slow_steps_agree_after_every_step(preemption, clock):
    preemption.CHECK_EVERY_S = 0.05
    assert steps(preemption, clock, 5, 0.1) == [1, 2, 3, 4, 5]


def test_the_gap_is_capped_however_cheap_the_steps(preemption, clock):
    cap = preemption.MAX_STEPS_BETWEEN_CHECKS
    assert steps(preemption, clock, 2 * cap + 1, 1 / 2**20) == [1, 1 + cap, 1 + 2 * cap]


def test_a_signal_stops_training_at_the_next_agreement(preemption, clock):
    assert steps(preemption, clock, 20, 1 / 64) == [1]
    preemption._handler(10, None)  # what SIGUSR1 does
    # The next agreement is step 65 of the epoch: the 45th of these steps, not the first.
    with pytest.raises(Preempted, match="after step 45$"):
        steps(preemption, clock, 1000, 1 / 64)


def test_a_rank_stopping_for_a_preemption_survives_the_signal_again(tmp_path):
    """A second SIGUSR1 (under Slurm a rank gets one from its step and one from mpirun's daemon) reaching a rank
    whose Preemption has torn down, while it saves and exits: ignored once a preemption was asked, its default
    action (death) again where none was."""
    for asked in (True, False):
        callback = Preemption(["SIGUSR1"], tmp_path / "last.ckpt")
        before = signal.getsignal(signal.SIGUSR1)
        try:
            callback.setup(None, None, "fit")
            if asked:
                os.kill(os.getpid(), signal.SIGUSR1)
                assert callback.requested
            callback.teardown(None, None, "fit")
            assert signal.getsignal(signal.SIGUSR1) == (signal.SIG_IGN if asked else before)
            if asked:
                os.kill(os.getpid(), signal.SIGUSR1)  # this process lives on
        finally:
            signal.signal(signal.SIGUSR1, before)


# A real Trainer, Lightning's own demo model (a workload this project did not write): a signal agreed
# at an epoch's last step. Lightning takes a save made there for a finished epoch, and a resume from
# it skips that epoch's validation and end hooks (its epoch-interval scheduler step among them).
class SignalAt(Callback):
    """Raises the preemption flag, as SIGUSR1 would, after the given step of the given epoch."""

    def __init__(self, preemption: Preemption, epoch: int, batch: int) -> None:
        self.preemption, self.epoch, self.batch = preemption, epoch, batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if (trainer.current_epoch, batch_idx) == (self.epoch, self.batch):
            self.preemption._handler(signal.SIGUSR1, None)


class Validated(Callback):
    """The epochs validated, and the scheduler's learning rate at each validation."""

    def __init__(self) -> None:
        self.epochs: list[tuple[int, float]] = []

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self.epochs.append((trainer.current_epoch, trainer.optimizers[0].param_groups[0]["lr"]))


class Rows(torch.utils.data.Dataset):
    def __init__(self, rows: torch.Tensor) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitems__(self, indices: list[int]) -> torch.Tensor:
        return self.rows[torch.as_tensor(indices)]


class ScheduledBoringModel(BoringModel):
    """Lightning's demo model with a learning rate halved every epoch, trained on the same 4 batches in
    every epoch and attempt through snakeddp's resumable loader (BoringModel's own loader draws new data
    from the global generator each time, and a plain DataLoader restarts an interrupted epoch)."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    def train_dataloader(self):
        rows = Rows(torch.randn(8, 32, generator=torch.Generator().manual_seed(1)))
        sampler = ShardedBatchSampler(8, 2, 0, 1, seed=0, epoch=self.trainer.current_epoch, shuffle=True)
        return ResumableLoader(rows, sampler, lambda: batches_done(self.trainer))

    def val_dataloader(self):
        rows = Rows(torch.randn(4, 32, generator=torch.Generator().manual_seed(2)))
        return ResumableLoader(rows, ShardedBatchSampler(4, 2, 0, 1, seed=0, epoch=0, shuffle=False), lambda: 0)


def fit(directory: Path, validated: Validated, *callbacks: Callback, ckpt_path: Path | None = None) -> BoringModel:
    torch.manual_seed(0)
    model = ScheduledBoringModel()
    trainer = pl.Trainer(
        max_epochs=3, reload_dataloaders_every_n_epochs=1, callbacks=[*callbacks, validated],  # as snakeddp's
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, default_root_dir=directory,
    )  # fmt: skip
    trainer.fit(model, ckpt_path=ckpt_path, weights_only=False)
    return model


def test_a_signal_at_an_epochs_last_step_stops_where_the_resume_validates_and_schedules_that_epoch(tmp_path):
    """The stop comes after the next epoch's first step: the resumed run is the uninterrupted one, to the bit."""
    seen = Validated()
    uninterrupted = fit(tmp_path / "uninterrupted", seen)
    preemption, before, after = Preemption(["SIGUSR1"], tmp_path / "last.ckpt"), Validated(), Validated()
    with pytest.raises(Preempted, match="after step 5$"):
        fit(tmp_path / "signalled", before, SignalAt(preemption, epoch=0, batch=3), preemption)
    assert preemption.preempted and preemption.last_path.exists()
    resumed = fit(tmp_path / "resumed", after, ckpt_path=preemption.last_path)
    assert before.epochs + after.epochs == seen.epochs  # each epoch validated once, at the same learning rate
    for mine, theirs in zip(resumed.parameters(), uninterrupted.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_a_signal_at_the_last_step_of_the_last_epoch_lets_the_run_finish(tmp_path):
    preemption, seen = Preemption(["SIGUSR1"], tmp_path / "last.ckpt"), Validated()
    fit(tmp_path, seen, SignalAt(preemption, epoch=2, batch=3), preemption)
    assert [epoch for epoch, _ in seen.epochs] == [0, 1, 2] and not preemption.preempted
