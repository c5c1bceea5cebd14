"""Rank 0 keeps the run's status.json current and accounts for its try's seconds as it goes.

Every POST_S seconds (the watch's post, snakeddp.cluster.hang), at a step's end, rank 0 rewrites status.json
(snakeddp.run.status): training, the epoch and step, samples/s over the last minute, the % complete and the
ETA, and its account so far (snakeddp.run.account's measured buckets), which the launcher folds into the try
when the ranks are gone. Nothing is exchanged with the other ranks: rank 0 alone writes, and a run of one
process posts the same way.

The buckets come from Lightning's hooks, in the order ``Trainer.fit`` calls them: the ranks' process group
and device are set up before ``setup`` (less the DataModule's own setup, timed apart: ``fit_called``), a
resumed checkpoint is loaded between ``setup`` and ``on_load_checkpoint``, a step runs from
``on_train_batch_start`` to ``on_train_batch_end``, and the wait before a step (less any checkpoint written
meanwhile) is data loading.
"""

from __future__ import annotations

import collections
import math
import os
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from snakeddp.cluster.hang import POST_S
from snakeddp.run import status, variables
from snakeddp.training.callbacks import Preempted, batch_size
from snakeddp.training.phases import Phases
from snakeddp.util import gpus
from snakeddp.util.gpuload import Utilisation

# The pace the ETA assumes: steps over about the last minute.
PACE_S = 60.0


class LiveStatus(Callback):
    """status.json from rank 0, with every post; ``account`` is its try's measured seconds so far."""

    def __init__(self, run_dir: Path, phases: Phases) -> None:
        self.run_dir, self.phases = run_dir, phases
        self.setup_at = self.restored_at = self.train_start_at = None
        self.productive = self.productive_at_save = self.data_loading = 0.0
        self._batch_start: float | None = None
        self._waiting_since: tuple[float, float] | None = None  # (when, checkpoint seconds then)
        self._posted_at = 0.0
        # (wall clock, step, training-loop seconds, this rank's samples) of the posts over about the last minute.
        self._pace: collections.deque[tuple[float, int, float, int]] = collections.deque()
        self.total_steps: int | None = None
        self._counted_epoch: int | None = None
        # The samples of every batch this rank has trained on: an epoch's last batch may be short (4,000 rows in
        # batches of 128 end in one of 32), so the steps times one batch's size would not count them.
        self.samples = 0
        self.load: Utilisation | None = None
        self.poster = status.Poster(run_dir)
        self.fit_called_at: float | None = None
        self.data_setup_s = 0.0
        # productive_at_save counts from a checkpoint saved whole, as last.json does (the wall time a try that stops
        # later lost, run.tries): a save whose write fails (a full disk) keeps nothing. Its dump comes first.
        self._productive_at_dump = 0.0
        self._trainer: pl.Trainer | None = None
        kept = getattr(phases.checkpoints, "kept", None)
        if kept is not None:
            kept.append(self.saved_whole)

    def fit_called(self, datamodule: Any) -> None:
        """``trainer.fit`` is called now, on ``datamodule``: its ``setup``, which Lightning runs between setting
        up the process group and the callbacks' ``setup`` (snakeddp's reads the validation set), is timed as
        data loading, not accelerator init."""
        self.fit_called_at = time.perf_counter()
        own = datamodule.setup

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return own(*args, **kwargs)
            finally:
                self.data_setup_s += time.perf_counter() - began

        datamodule.setup = timed

    # Lightning's hooks, in the order fit calls them.

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.setup_at = time.perf_counter()
        self._trainer = trainer
        if trainer.is_global_zero and trainer.strategy.root_device.type == "cuda":
            self.load = Utilisation([gpu.uuid for gpu in gpus.visible(os.environ)], POST_S)
            self.load.start()

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: Any) -> None:
        self.restored_at = time.perf_counter()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.train_start_at = time.perf_counter()
        self.total_steps = _total_steps(trainer)
        self._post(trainer, force=True)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._waiting_since = (time.perf_counter(), self.phases.checkpoints.seconds)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, i: int) -> None:
        now = time.perf_counter()
        if self._waiting_since is not None:
            since, saving = self._waiting_since
            self.data_loading += max(now - since - (self.phases.checkpoints.seconds - saving), 0.0)
        self._batch_start = now
        if trainer.current_epoch != self._counted_epoch:
            # Each epoch loads its own partition, and they need not hold the same number of batches (a table's
            # partitions differ by a few rows): counted again at its first batch (i: a mid-epoch resume's).
            self._counted_epoch = trainer.current_epoch
            self.total_steps = _total_steps(trainer, i)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, i: int
    ) -> None:
        now = time.perf_counter()
        if self._batch_start is not None:
            self.productive += now - self._batch_start
        self.samples += batch_size(batch)
        self._waiting_since = (now, self.phases.checkpoints.seconds)
        self._post(trainer)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._waiting_since = None  # validation is not the wait for the next batch

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.train_start_at is not None:
            self._waiting_since = (time.perf_counter(), self.phases.checkpoints.seconds)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: Any) -> None:
        self._productive_at_dump = self.productive

    def saved_whole(self) -> None:
        """The checkpoint just dumped is saved whole: what the next try need not train again, posted at once (and
        written before the save returns), so that a try that stops before its next post is accounted from it."""
        self.productive_at_save = self._productive_at_dump
        if self._trainer is not None and self._trainer.is_global_zero:
            self._post(self._trainer, force=True)
            self.poster.flush()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._post(trainer, force=True)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._post(trainer, force=True, ended=True)
        self.poster.flush()  # written before the provenance record reads the account back
        if self.load is not None:
            self.load.stop()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """A preemption's stop, after Preemption (an earlier callback) saved last.ckpt: the step and epoch it
        stopped at and the account with that save, which the launcher keeps, not the last post's (up to POST_S
        before: a run stopped in epoch 164 at step 5,236 said 163, step 5,216)."""
        if isinstance(exception, Preempted):
            self._post(trainer, force=True)
            self.poster.flush()

    # What rank 0 writes.

    def account(self) -> dict[str, Any]:
        """The try's seconds rank 0 measured so far (run.account.MEASURED), and the GPUs' load."""
        marks, started = self.phases.marks, self.phases.started
        now = time.perf_counter()
        try_started = float(os.environ.get(variables.TRY_STARTED) or 0.0)
        # From the launcher's start of the try to this process's start (torchrun's, srun's own start-up).
        launching = max(time.time() - (now - started) - try_started, 0.0) if try_started else 0.0
        built = marks.get("trainer_built", started)
        met = marks.get("met", built)
        fit = self.fit_called_at or met
        setup = self.setup_at or now
        restore = (self.restored_at - setup) if self.restored_at else 0.0
        # The ranks' meeting (store, rendezvous), then fit's process group and device up to ``setup``, less the
        # DataModule's own setup in between.
        accelerator = (met - built) + max(setup - fit - self.data_setup_s, 0.0)
        # Imports, checks, the Trainer, what ran between the meeting and fit (the trackers' config), fit's set-up.
        startup = (built - started) + (fit - met) + max((self.train_start_at or setup) - setup - restore, 0.0)
        return {
            "productive_s": round(self.productive, 3),
            "productive_at_save_s": round(self.productive_at_save, 3),
            "accelerator_init_s": round(max(accelerator, 0.0), 3),
            "program_startup_s": round(launching + max(startup, 0.0), 3),
            "data_loading_s": round(self.data_loading + self.data_setup_s, 3),
            "checkpoint_save_s": round(self.phases.checkpoints.seconds, 3),
            "checkpoint_restore_s": round(max(restore, 0.0), 3),
            "gpu_util_mean": self.load.mean() if self.load else None,
            "gpu_util_samples": self.load.samples if self.load else 0,
        }

    def _post(self, trainer: pl.Trainer, force: bool = False, ended: bool = False) -> None:
        """status.json now (at most every POST_S seconds unless ``force``); ``ended``: the fit has returned."""
        now = time.time()
        if not trainer.is_global_zero or (not force and now - self._posted_at < POST_S):
            return
        self._posted_at = now
        step = trainer.global_step
        # The training loop's own seconds (steps, and the waits for their batches), as runs.csv and the report time
        # samples/s: the wall clock also holds validation and checkpoints, which the ETA must count and samples/s
        # must not (a small-batch run said 9,790 samples/s here and 67,031 in `snakeddp runs`).
        loop_s = self.productive + self.data_loading
        self._pace.append((now, step, loop_s, self.samples))
        while len(self._pace) > 2 and now - self._pace[0][0] > PACE_S:
            self._pace.popleft()
        first_at, first_step, first_loop_s, first_samples = self._pace[0]
        elapsed, in_loop = now - first_at, loop_s - first_loop_s
        steps_per_s = (step - first_step) / elapsed if elapsed > 0 and step > first_step else None
        # Every rank trains on as many batches as rank 0 (the sampler splits each partition evenly).
        samples = (self.samples - first_samples) * trainer.world_size
        # 1-based. Once the fit has returned, Lightning's current_epoch counts the epochs it went into (an early
        # stop's last one included): the last of them, not one more (18 epochs said 19/300).
        epoch = max(trainer.current_epoch, 1) if ended else trainer.current_epoch + 1
        self.poster.post(
            "training",
            writer="rank 0",
            epoch=min(epoch, trainer.max_epochs or epoch),
            max_epochs=trainer.max_epochs,
            step=step,
            total_steps=self.total_steps,
            samples_per_s=round(samples / in_loop, 2) if in_loop > 0 and samples > 0 else None,
            **status.progress(step, self.total_steps, steps_per_s),
            account=self.account(),
        )


def _total_steps(trainer: pl.Trainer, batch_index: int = 0) -> int | None:
    """The steps the fit will have taken at its end: those taken, and the loaded epoch's batches for it and each
    epoch left, ``batch_index`` of this epoch's taken (Lightning's estimated_stepping_batches counts the first
    epoch's batches for every epoch)."""
    try:
        batches, accumulate = trainer.num_training_batches, trainer.accumulate_grad_batches
        if batches in (None, float("inf")) or trainer.max_epochs is None or trainer.max_epochs < 0:
            return None
        left = max(trainer.max_epochs - trainer.current_epoch, 0)
        total = trainer.global_step - math.ceil(batch_index / accumulate) + math.ceil(batches / accumulate) * left
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None
    return min(total, trainer.max_steps) if trainer.max_steps not in (None, -1) else total
