"""Lightning callbacks that make a run observable, resumable and auditable."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from snakeddp.compat.lightning import is_last_batch
from snakeddp.errors import MonitorError
from snakeddp.provenance.record import utc_now
from snakeddp.run.layout import TRACE_FILE
from snakeddp.run.runs import BOOKKEEPING, LEADING, TRAILING, metric_order
from snakeddp.run.variables import RANK_START
from snakeddp.util.fsutil import append_whole, atomic_write_text
from snakeddp.util.terminal import say

HOST_RECORD_BYTES = 512


def batch_size(batch: Any) -> int:
    """Samples in a batch of tensors, tuples or dicts of them (the first tensor's length)."""
    if isinstance(batch, torch.Tensor):
        return len(batch)
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    return next((batch_size(item) for item in items), 0)


def scalar_metrics(trainer: pl.Trainer) -> dict[str, float]:
    """What the model logged, as Lightning holds it for callbacks (single numbers only)."""
    values = {}
    for name, value in trainer.callback_metrics.items():
        if (isinstance(value, torch.Tensor) and value.numel() == 1) or isinstance(value, (int, float)):
            values[name] = float(value)
    return values


class MonitoredMetric(Callback):
    """Stops every rank, with one line, at the end of the first epoch when the model has not logged
    the metric that checkpoint selection and early stopping rank epochs by (trainer.monitor).

    Lightning's own checks fail later, inside those callbacks, with a traceback from every rank.
    This one runs before them (at the end of the training epoch, after its validation), on every
    rank alike, since every rank logs the same names.
    """

    def __init__(self, metric: str, run_id: str = "") -> None:
        self.metric = metric
        self.run_id = run_id
        self.seen = False
        self.diverged_at: int | None = None
        """The epoch (Lightning's, from 0) whose monitored value was NaN or infinite on some rank, where it stopped."""
        self.shown = ""

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if self.seen:
            self._stop_if_diverged(trainer)
            return
        logged = sorted(trainer.callback_metrics)
        if self.metric in logged:
            self.seen = True
            self._stop_if_diverged(trainer)
            return
        shown = ", ".join(logged) if logged else "nothing (no self.log call reached Lightning)"
        other = (
            f"set trainer.monitor.metric to one of {', '.join(logged)} (with mode max if higher is better), or "
            if logged
            else ""
        )
        # Epoch 1 is Lightning's epoch 0, as the progress lines and runs.csv count them.
        raise MonitorError(
            f"trainer.monitor.metric={self.metric!r}: {type(pl_module).__name__} did not log it by the end of epoch "
            f"{trainer.current_epoch + 1} (it logged: {shown}); checkpoint selection and early stopping rank epochs "
            f"by it. HINT: {other}log it in validation_step, e.g. self.log({self.metric!r}, loss)."
        )

    def _stop_if_diverged(self, trainer: pl.Trainer) -> None:
        """A NaN or infinite monitored value on any rank stops every rank after this epoch, with one line: each
        epoch after it would train on weights that are lost (Lightning's early stopping stops it only where it is
        on, and then says nothing), and its checkpoint ranks nowhere. Every rank asks (one all-reduce an epoch)."""
        value = trainer.callback_metrics.get(self.metric)
        finite = value is None or bool(torch.isfinite(torch.as_tensor(value)).all())
        if not trainer.strategy.reduce_boolean_decision(not finite, all=False) or self.diverged_at is not None:
            return
        self.diverged_at = trainer.current_epoch
        self.shown = "not finite (on another rank)" if value is None or finite else f"{float(value)}"
        trainer.should_stop = True

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The line, after the epoch's own (the progress callback comes after this one)."""
        if self.diverged_at is not None and trainer.is_global_zero:
            say(
                f"{self.run_id}: {self.metric} is {self.shown} at epoch {self.diverged_at + 1}: the model diverged, "
                "and training stopped there (the run's record says diverged, and ranks no checkpoint). HINT: lower "
                "the learning rate (model.lr, or your model's own in model.kwargs) and rerun, which trains the run "
                "again from epoch 1; or look in the loss for a log of 0 or a division by zero."
            )


class EpochMetrics(Callback):
    """One row per epoch in ``metrics.csv`` (rank 0), surviving resumes.

    A resumed attempt first drops the rows of epochs it is about to redo, so the file always
    describes exactly the epochs the final model went through.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self._epoch_start = self._train_end = 0.0
        self._counts = [0, 0, 0, 0]  # samples, batches, val_samples, val_batches of this epoch, this rank

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Runs after a resume restored the loops (so current_epoch is the resumed one), and is
        # the only start hook of an epoch resumed mid-way.
        self.on_train_epoch_start(trainer, pl_module)
        if not trainer.is_global_zero:
            return
        self.rows = [r for r in self.read() if int(r["epoch"]) < trainer.current_epoch]
        self._write()

    def read(self) -> list[dict[str, Any]]:
        """The rows written so far, by this attempt and the ones it resumed."""
        if not self.path.is_file():
            return []
        with self.path.open() as handle:
            return list(csv.DictReader(handle))

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_start = self._train_end = time.perf_counter()
        self._counts = [0, 0, 0, 0]

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._counts[0] += batch_size(batch)
        self._counts[1] += 1

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not trainer.sanity_checking:
            self._counts[2] += batch_size(batch)
            self._counts[3] += 1

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._train_end = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        now = time.perf_counter()
        train_seconds = (self._train_end if self._train_end > self._epoch_start else now) - self._epoch_start
        data = trainer.datamodule
        wait = torch.tensor(float(getattr(data, "epoch_wait_s", 0.0)), device=pl_module.device)
        counts = torch.tensor(self._counts, dtype=torch.float64, device=pl_module.device)
        if trainer.world_size > 1:
            wait = trainer.strategy.reduce(wait, reduce_op="max")
            counts = trainer.strategy.reduce(counts, reduce_op="sum")
        wait = float(wait)
        samples, batches, val_samples, val_batches = (int(n) for n in counts.tolist())
        if not trainer.is_global_zero:
            return
        logged = {k: v for k, v in scalar_metrics(trainer).items() if k not in BOOKKEEPING}
        self.rows.append(
            {
                "epoch": trainer.current_epoch,
                "partition": getattr(data, "epoch_partition", ""),
                "samples": samples,
                "batches": batches,
                # An epoch without validation (check_val_every_n_epoch) counted none: not zero records.
                "val_samples": val_samples if val_batches else None,
                "val_batches": val_batches if val_batches else None,
                **logged,
                "lr": trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None,
                "train_seconds": round(train_seconds, 6),
                "epoch_seconds": round(now - self._epoch_start, 6),
                "samples_per_s": round(samples / train_seconds, 3) if train_seconds > 0 else None,
                "data_wait_s": round(wait, 6),
                "world_size": trainer.world_size,
                "finished_at": utc_now(),
            }
        )
        self._write()

    @property
    def columns(self) -> list[str]:
        """LEADING, every metric any epoch logged (metric_order), TRAILING."""
        logged = {name for row in self.rows for name in row if name not in BOOKKEEPING}
        return [*LEADING, *sorted(logged, key=metric_order), *TRAILING]

    def _write(self) -> None:
        columns = self.columns
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(["" if row.get(c) in (None, "") else row[c] for c in columns] for row in self.rows)
        atomic_write_text(self.path, text.getvalue())


class Preempted(Exception):
    """Raised on every rank at the same step after a preemption signal; last.ckpt is saved on the way out."""


class Preemption(Callback):
    """Stop every rank at the same step on a scheduler's warning signal and save a resumable last.ckpt.

    The signal handler only raises a flag: no collective ever runs inside a handler. About once a
    second (``CHECK_EVERY_S``), after a training step, the ranks agree with one all-reduce whether
    any of them was signalled (a signal reaches ranks at different moments: under Slurm each
    node's slurmstepd sends its own, and some launchers reach only some ranks). The same
    all-reduce carries the slowest rank's step time, from which every rank computes the same
    number of steps to the next check; so a cheap step pays for one collective per second, not
    one per step, and a slow step (seconds) is still checked after every step. Then every rank raises
    ``Preempted`` from the same step, ``on_exception`` saves last.ckpt (a collective save that
    records the loader's position mid-epoch) and ``snakeddp.train`` exits with code 75. A rerun
    resumes at the next batch of the same epoch and partition. Agreed at an epoch's last step, the
    stop comes one step later, after the next epoch's first (its partition is prefetched already):
    Lightning takes a save made after an epoch's last step for a finished epoch, and a resume from it
    skips that epoch's validation and end hooks (its metrics row, its checkpoint, early stopping's
    look at it); a save at the next epoch's start resumes no better (Lightning reads the previous
    epoch's step counts as this one's). After the last epoch's last step the run just finishes.

    Lightning's own SIGTERM handling is not used: it broadcasts from inside the signal handler
    and checks rank 0's flag locally at the end of a step, which lets rank 0 stop a step before
    the others and deadlocks the checkpoint save.
    """

    # Seconds between agreements: far below the lead time any scheduler gives (sbatch --signal
    # defaults to 60 s; profiles/slurm asks for 90 s), far above a collective's cost.
    CHECK_EVERY_S = 1.0
    MAX_STEPS_BETWEEN_CHECKS = 1000

    def __init__(self, signals: list[str], last_path: Path) -> None:
        self.signals = [getattr(signal, name) for name in signals]
        self.last_path = last_path
        self.requested = False
        self.preempted = False
        self.stop_after_next_step = False  # agreed at an epoch's last step
        self.checks = 0
        self._previous: dict[int, Any] = {}
        self._step = self._next_check = self._checked_step = 0
        self._checked_at = 0.0

    def _handler(self, signum: int, frame: Any) -> None:
        self.requested = True

    def _install(self) -> None:
        for signum in self.signals:
            previous = signal.signal(signum, self._handler)
            self._previous.setdefault(signum, previous)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._install()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning registers its own SIGTERM handler after setup, wrapping ours; take it back.
        self._install()
        # Every rank counts the steps of this attempt from 0 (ranks run equal numbers of steps).
        self._step = self._next_check = self._checked_step = 0
        self._checked_at = time.perf_counter()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # A rank stopping for a preemption ignores the signal from then on: under Slurm a rank gets it more than
        # once (from its step and from mpirun's daemon, which forwards it), and the default action of a second
        # SIGUSR1 while the rank saves or exits killed it, and mpirun then aborted the other ranks.
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_IGN if self.requested else previous)
        self._previous.clear()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._step += 1
        if self.stop_after_next_step:  # agreed already, at the previous epoch's last step
            requested = True
        elif trainer.world_size == 1:  # nobody to agree with: check the flag after every step
            requested = self.requested
        elif self._step < self._next_check:
            return
        else:
            requested = self._agree(trainer, pl_module)
        if not requested:
            return
        if is_last_batch(trainer):  # the same on every rank: they run the same steps
            self.stop_after_next_step = True
            return
        raise Preempted(f"preemption signal received; stopping after step {trainer.global_step}")

    def _agree(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> bool:
        """One all-reduce (max) of [signalled, seconds per step since the last check]; sets the next check."""
        now = time.perf_counter()
        step_s = (now - self._checked_at) / max(self._step - self._checked_step, 1)
        local = torch.tensor([float(self.requested), step_s], dtype=torch.float64, device=pl_module.device)
        signalled, slowest_step_s = trainer.strategy.reduce(local, reduce_op="max").tolist()
        self.checks += 1
        steps = int(self.CHECK_EVERY_S / slowest_step_s) if slowest_step_s > 0 else 1
        self._next_check = self._step + min(max(steps, 1), self.MAX_STEPS_BETWEEN_CHECKS)
        self._checked_step, self._checked_at = self._step, now
        return signalled > 0

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, Preempted):
            trainer.save_checkpoint(self.last_path, weights_only=False)
            self.preempted = True


class SampleTrace(Callback):
    """Writes the sample ids each rank trained on in each epoch to ``trace/rank-<r>.jsonl``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _write(self, trainer: pl.Trainer, complete: bool) -> None:
        data = trainer.datamodule
        ids = torch.cat(data.trace).tolist() if data.trace else []
        data.trace.clear()
        self.directory.mkdir(parents=True, exist_ok=True)
        record = {
            "epoch": trainer.current_epoch,
            "partition": data.epoch_partition,
            "rank": trainer.global_rank,
            "complete": complete,
            "ids": ids,
        }
        path = self.directory / TRACE_FILE.format(rank=trainer.global_rank)
        append_whole(path, (json.dumps(record) + "\n").encode(), what="the sample trace")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._write(trainer, complete=True)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._write(trainer, complete=False)


def _encode(record: dict[str, Any]) -> torch.Tensor:
    raw = json.dumps(record).encode()[:HOST_RECORD_BYTES]
    return torch.tensor(list(raw.ljust(HOST_RECORD_BYTES, b" ")), dtype=torch.uint8)


class RankHosts(Callback):
    """Gathers where every rank runs (host, node, pid, device) with one all_gather of fixed-size bytes.

    Plain tensors, not all_gather_object, which would pickle.
    """

    def __init__(self, node_name: str | None, executor: dict[str, Any] | None = None) -> None:
        self.node_name = node_name
        self.executor = executor
        self.ranks: list[dict[str, Any]] = []

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        mine = {
            "rank": trainer.global_rank,
            "local_rank": trainer.local_rank,
            "node_rank": trainer.node_rank,
            "host": socket.gethostname(),
            "node": self.node_name,
            "pid": os.getpid(),
            "device": str(pl_module.device),
            # Set by snakeddp's supervisor; every other launcher starts each rank as a process of its own.
            "start": os.environ.get(RANK_START, "cold"),
            # A Spark executor's id, host and JVM pid (snakeddp.spark.rank): only under TorchDistributor.
            **({"executor": self.executor} if self.executor else {}),
        }
        local = _encode(mine).to(pl_module.device)
        gathered = trainer.strategy.all_gather(local) if trainer.world_size > 1 else local.unsqueeze(0)
        gathered = gathered.reshape(-1, HOST_RECORD_BYTES).cpu()
        self.ranks = [json.loads(bytes(row.tolist()).decode().strip()) for row in gathered]
