"""Where a training process spends its wall time, from process start to its provenance record.

The phases are provenance's ``timing.phases``: what a run costs besides its training loop
(start-up, validation, checkpoints, teardown), measured by the process that paid for it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import psutil
from lightning.pytorch.callbacks import Callback


def process_started() -> float:
    """This process's start on the ``time.perf_counter`` clock (the kernel's start time, 10 ms steps).

    Read as the kernel keeps it, clock ticks since boot against its uptime: psutil's create_time adds
    the boot time, which Linux gives in whole seconds, and put every start up to 1 s early (0.92 s on
    the benchmark VM, all of it counted as imports).
    """
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):  # not Linux
        return time.perf_counter() - (time.time() - psutil.Process().create_time())
    return time.perf_counter() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


class Phases(Callback):
    """Times the first training step, the epochs, validation and the end of the last epoch of this attempt.

    ``marks`` holds the points ``snakeddp.train`` sets itself (``main``, ``checked``, ``trainer_built``,
    ``met``: the ranks' meeting done); ``checkpoints`` is the checkpoint writer, which sums its writes in ``seconds``.
    """

    def __init__(self, checkpoints: Any) -> None:
        self.checkpoints = checkpoints
        self.started = process_started()
        self.marks: dict[str, float] = {}
        self.first_step: float | None = None
        self.last_epoch_end: float | None = None
        self.epochs_s = self.validation_s = 0.0
        self._epoch_start = self._validation_start = 0.0

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.first_step is None:
            self.first_step = time.perf_counter()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_train_epoch_start(trainer, pl_module)  # the only start hook of an epoch resumed mid-way

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_start = time.perf_counter()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._validation_start = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.validation_s += time.perf_counter() - self._validation_start

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.last_epoch_end = time.perf_counter()
        self.epochs_s += self.last_epoch_end - (self._epoch_start or self.last_epoch_end)

    def record(self) -> dict[str, float]:
        """``timing.phases`` of this attempt, up to now."""
        now = time.perf_counter()
        checkpoint_s = self.checkpoints.seconds
        first_step = self.first_step or now
        since = {name: at - self.started for name, at in self.marks.items()}
        return {
            name: round(max(seconds, 0.0), 3)
            for name, seconds in {
                "startup_s": first_step - self.started,
                # Checkpoints are written inside the epoch, after validation (ModelCheckpoint runs last).
                "train_loop_s": self.epochs_s - self.validation_s - checkpoint_s,
                "validation_s": self.validation_s,
                "checkpoint_s": checkpoint_s,
                "teardown_s": now - (self.last_epoch_end or now),
                "total_s": now - self.started,
                "imports_s": since.get("main", 0.0),
                "checks_s": since.get("checked", 0.0) - since.get("main", 0.0),
                "trainer_build_s": since.get("trainer_built", 0.0) - since.get("checked", 0.0),
                "meeting_s": since.get("met", 0.0) - since.get("trainer_built", 0.0),
                "fit_setup_s": first_step - self.marks.get("met", first_step),
            }.items()
        }
