"""Lightning's private parts that training relies on; imported by the training modules, after Lightning.

**SIGTERM.** Lightning 2.5.2+ broadcasts rank 0's SIGTERM flag before every training step and reads
it back with ``.item()`` (``_TrainingEpochLoop._broadcast_sigterm_tensor``, PR #20825, for the
deadlock of issue #20806): one more collective and a host sync per step, about a third of a small
model's step on 2 CPU processes (bench/results.md, 4. Training overhead). ``Trainer(barebones=True)``
keeps it. When SIGTERM is one of ``trainer.preempt_signals``, ``Preemption`` handles it: every rank
raises a flag, the ranks agree about once a second with one all-reduce and all stop after the same
step, which is the safety #20806 asked for. Lightning's SIGTERM notifier would also run (it wraps
our handler) and broadcast from inside the signal handler on rank 0, which only the per-step
broadcast receives; so both are turned off together, on one trainer's objects only.

**An epoch's last step.** Preemption must not stop after it (Lightning resumes from a save made there
as from a finished epoch, skipping its validation and end hooks). ``trainer.num_training_batches``
(``limit_train_batches`` included) does not know it for a loader without a length; the epoch
loop's ``batch_progress.is_last_batch`` (set from the data fetcher, one batch ahead) does.

**Batches done.** A resumable loader's state is the epoch loop's ``batch_progress.current.processed``
(``batches_done``).

**Where a rank is.** The watch (snakeddp.training.watch) reads, from its own thread, what the rank is
in: Lightning names the hook, step or strategy call it runs in ``LightningModule._current_fx_name``
(training_step, backward, on_train_epoch_end, ...), and its loops count the batches they started.
Read, never written: a sample costs the training loop nothing.

**last.ckpt.** ``ModelCheckpoint`` saves last.ckpt in private steps; ``LastCheckpointHooks`` gives
them public names for ``snakeddp.training.checkpoints``.

**Object storage.** Lightning asks, of each checkpoint it saves and each checkpoint path it sets up, whether
the file system is adlfs', gcsfs' or s3fs' (``cloud_io``: ``module_available`` of each, then ``isinstance``),
and ``module_available`` imports the package to answer: 0.6 s of CPU in every rank's start wherever a user added
them (``tools/add.sh adlfs`` for tables in Azure). A file system of theirs exists only once its package is
imported (fsspec imports it for an ``az://``, ``gs://`` or ``s3://`` path), so cloud_io asks whether it is
imported instead: the same answers, nothing imported. Applied when this module is imported, in every process
that trains.
"""

from __future__ import annotations

import sys
from typing import Any

import lightning
import lightning.pytorch as pl
from lightning.fabric.utilities import cloud_io
from lightning.pytorch.callbacks import ModelCheckpoint

from snakeddp.compat import check_package

# The imported release's own version: no search of the installed packages' metadata at every rank's start.
check_package("lightning", lightning.__version__)


def _imported(name: str) -> bool:
    """For cloud_io, which asks whether adlfs, gcsfs or s3fs is available only to test a file system against
    their classes: whether it is imported (no instance of theirs exists before that)."""
    return name in sys.modules


cloud_io.module_available = _imported


def _ignore(*args: Any) -> None:
    """Stands in for Lightning's SIGTERM broadcast and notifier: Preemption owns SIGTERM."""


def hand_sigterm_to_preemption(trainer: pl.Trainer) -> None:
    """Drop Lightning's per-step SIGTERM broadcast and its SIGTERM notifier on this trainer."""
    trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor = _ignore
    trainer._signal_connector._sigterm_notifier_fn = _ignore


def is_last_batch(trainer: pl.Trainer) -> bool:
    """Whether the step that just ended was the last of its epoch (read in on_train_batch_end): its
    loader is done, or the epoch's batch count (``limit_train_batches`` included) is reached."""
    progress = trainer.fit_loop.epoch_loop.batch_progress
    return bool(progress.is_last_batch) or progress.current.ready == trainer.num_training_batches


def batches_done(trainer: pl.Trainer) -> int:
    """The steps of the current epoch that a checkpoint saved now counts as trained."""
    # "processed", not "completed": a save from on_train_batch_end (preemption) happens after
    # the step but before Lightning counts it completed, and Lightning's restart counts it.
    return trainer.fit_loop.epoch_loop.batch_progress.current.processed


def fit_position(trainer: pl.Trainer) -> tuple[int, int, int, str | None]:
    """(optimizer steps, training and validation batches started, epoch, the hook or step being run), read
    from another thread while the trainer fits (each a plain attribute read)."""
    loop = trainer.fit_loop.epoch_loop
    module = trainer.lightning_module
    started = loop.batch_progress.total.started + loop.val_loop.batch_progress.total.started
    return trainer.global_step, started, trainer.current_epoch, getattr(module, "_current_fx_name", None)


class LastCheckpointHooks(ModelCheckpoint):
    """ModelCheckpoint with its private last.ckpt steps under public names."""

    def on_last_saved(self, trainer: pl.Trainer) -> None:
        """Called after every save of last.ckpt, Lightning's own included."""

    def write_last(self, trainer: pl.Trainer) -> None:
        """Save last.ckpt now, with the metrics Lightning would name it after."""
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def saves_on_train_epoch_end(self, trainer: pl.Trainer) -> bool:
        """Whether this callback saves at the end of the training epoch (else after validation)."""
        return self._should_save_on_train_epoch_end(trainer)

    def _save_last_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self.on_last_saved(trainer)
