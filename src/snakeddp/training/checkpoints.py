"""The run's checkpoints: the top-k by val_loss, and a last.ckpt that always holds the latest epoch."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from snakeddp.compat.lightning import LastCheckpointHooks

# What fsutil.atomic_write leaves behind when a kill lands in the middle of a save.
PARTIAL_GLOB = ".*.partial"


class EpochCheckpoint(LastCheckpointHooks):
    """ModelCheckpoint that rewrites last.ckpt at the end of every epoch.

    Lightning 2.6 rewrites last.ckpt only in epochs that also saved a top-k checkpoint: with
    save_top_k 1 a run of 8 epochs ended with last.ckpt at epoch 6, and with 0 it never wrote
    one. Resuming and provenance's last_checkpoint need the last finished epoch.
    """

    def __init__(self, **kwargs) -> None:
        self._state_key: str | None = None
        super().__init__(save_last=True, **kwargs)
        self._last_saved_step: int | None = None

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
