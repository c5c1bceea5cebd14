"""The run's checkpoints: the top-k by val_loss, and a last.ckpt that always holds the latest epoch."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from snakeddp.cluster.lifecycle import FORWARDED
from snakeddp.compat.lightning import LastCheckpointHooks

# What fsutil.atomic_write leaves behind when a kill lands in the middle of a save.
PARTIAL_GLOB = ".*.partial"


class HeldStops(Callback):
    """Holds a stop that would end the rank at once (Ctrl-C's SIGINT, which Python raises as KeyboardInterrupt; a
    launcher's SIGTERM, SIGUSR1 or SIGUSR2 at its default, where ``trainer.preempt_signals`` leaves it out) from the
    start of an epoch's end hooks until its checkpoints are saved, then passes it on as it came.

    Lightning calls a finished epoch's ``on_train_epoch_end`` on the other callbacks first (its metrics row, its
    progress line), then on the checkpoint callback, which saves its top-k checkpoint and last.ckpt. A stop that
    landed in between ended the rank with the epoch trained, validated and shown, and no checkpoint of it: the rerun
    trained it again. Held, the stop waits for that save (the ranks stop at the same hook, after its collectives),
    and the rerun goes on with the next epoch. First among the callbacks, so that its hold begins before the
    others' end hooks; ``EpochCheckpoint`` releases it after its save. A preemption signal is ``Preemption``'s:
    its handler only raises a flag, and the ranks stop at a step of the next epoch."""

    #: A second of the same stop this long after the first is someone asking again (a second Ctrl-C): it ends the
    #: rank at once, save or not. Sooner, it is the first one delivered twice (the terminal's group and a launcher
    #: that passes it on, as mpirun does).
    AGAIN_AFTER_S = 1.0

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.arrived: list[int] = []
        self.first_at: dict[int, float] = {}

    def _arrived(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if signum not in self.arrived:
            self.arrived.append(signum)
            self.first_at[signum] = now
        elif now - self.first_at[signum] >= self.AGAIN_AFTER_S:
            self.restore()
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.raise_signal(signum)  # its default again: the end of the process

    def hold(self) -> None:
        """From now on, keep each stop whose handler would end the rank at once until ``release``."""
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread sets handlers (a trainer run from another thread keeps its own)
        for signum in FORWARDED:
            handler = signal.getsignal(signum)
            if handler in (signal.SIG_DFL, signal.default_int_handler):
                self.previous[signum] = signal.signal(signum, self._arrived)

    def restore(self) -> None:
        """Put back the handlers ``hold`` replaced, and forget the stops held."""
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()
        self.first_at.clear()
        self.arrived.clear()

    def release(self) -> None:
        """Put back the handlers, then raise each stop held, in the order they came: SIGINT's KeyboardInterrupt from
        here, a default SIGTERM's end of the process."""
        arrived = list(self.arrived)
        self.restore()
        for signum in arrived:
            signal.raise_signal(signum)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.hold()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.restore()  # an end hook or the save failed: the rank stops on that, its handlers as they were

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.restore()


class EpochCheckpoint(LastCheckpointHooks):
    """ModelCheckpoint that rewrites last.ckpt at the end of every epoch.

    Lightning 2.6 rewrites last.ckpt only in epochs that also saved a top-k checkpoint: with
    save_top_k 1 a run of 8 epochs ended with last.ckpt at epoch 6, and with 0 it never wrote
    one. Resuming and provenance's last_checkpoint need the last finished epoch.
    """

    def __init__(self, held: HeldStops | None = None, **kwargs) -> None:
        self._state_key: str | None = None
        super().__init__(save_last=True, **kwargs)
        self._last_saved_step: int | None = None
        self.held = held
        """The stops held since the epoch's end hooks began, released once its checkpoints are saved."""

    @property
    def state_key(self) -> str:
        # Lightning names every hook call after its callback's state key, and ModelCheckpoint builds
        # it anew each time from settings fixed at construction: about 1% of an MLP step (a sampled
        # profile, bench/results.md 4.). The same key, built once.
        if self._state_key is None:
            self._state_key = super().state_key
        return self._state_key

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A checkpoint copied with the rest of its checkpoints/ (a continued budget, an AzureML job's
        folder) names its top-k where they were written. Lightning then forgets them (and warns), so a
        continued run would rank only its new epochs; the same names here are the same files."""
        saved = state_dict.get("dirpath")
        ranked = state_dict.get("best_k_models") or {}
        if saved and saved != self.dirpath and all(os.path.isfile(self._here(path)) for path in ranked):
            moved = ("best_model_path", "kth_best_model_path", "last_model_path")
            state_dict = {
                **state_dict,
                **{name: self._here(state_dict.get(name)) for name in moved if name in state_dict},
                "dirpath": self.dirpath,
                "best_k_models": {self._here(path): score for path, score in ranked.items()},
            }
        super().load_state_dict(state_dict)

    def format_checkpoint_name(
        self, metrics: dict[str, Any], filename: str | None = None, ver: int | None = None, prefix: str | None = None
    ) -> str:
        """Top-k files count epochs from 1 (epoch003 is the third), as the terminal, the report and
        runs.csv do; Lightning's ``epoch`` is the index from 0 that metrics.csv and provenance keep."""
        if "epoch" in metrics:
            metrics = {**metrics, "epoch": metrics["epoch"] + 1}
        return super().format_checkpoint_name(metrics, filename, ver, prefix)

    def _here(self, path: str | None) -> str | None:
        return os.path.join(self.dirpath, os.path.basename(path)) if path else path

    def on_last_saved(self, trainer: pl.Trainer) -> None:
        self._last_saved_step = trainer.global_step

    def _save_last_if_missed(self, trainer: pl.Trainer) -> None:
        if trainer.sanity_checking or trainer.fast_dev_run or self._last_saved_step == trainer.global_step:
            return
        self.write_last(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self.saves_on_train_epoch_end(trainer):
            self._save_last_if_missed(trainer)
        if self.held is not None:  # the last of the epoch's end hooks (Lightning calls checkpoint callbacks last)
            self.held.release()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if trainer.state.fn == "fit" and not self.saves_on_train_epoch_end(trainer):
            self._save_last_if_missed(trainer)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Only an attempt that finished knows that no save is in flight: it holds the run's lock.
        if trainer.is_global_zero:
            remove_partial_saves(Path(self.dirpath))


def remove_partial_saves(directory: Path) -> list[Path]:
    """Delete the temporary files of saves that a kill interrupted; return what was removed."""
    leftovers = sorted(directory.glob(PARTIAL_GLOB))
    for path in leftovers:
        path.unlink(missing_ok=True)
    return leftovers
