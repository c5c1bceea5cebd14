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
        ticks = int(Path("/proc/self/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text(encoding="utf-8").split()[0])
    except (OSError, ValueError, IndexError):  # not Linux
        return time.perf_counter() - (time.time() - psutil.Process().create_time())
    return time.perf_counter() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


# The phases each moment is charged to, in the order a run goes through them (provenance's timing.phases).
CHARGED = ("startup_s", "train_loop_s", "validation_s", "checkpoint_s", "epoch_ends_s", "teardown_s")


class Phases(Callback):
    """Charges each moment of this attempt's process to one phase, so that the phases add up to ``total_s``.

    Start-up runs to the first training step. Then the training loop, validation, and the epochs' ends (the
    hooks that follow snakeddp's own at an epoch's end: the model's, the checkpoint callback's and early
    stopping's; then the next epoch's data loaders). Teardown runs from training's end (or the exception that
    stopped it) to the record. A checkpoint write is taken out of the phase it fell in and charged to
    checkpoints: ``checkpoints`` is the writer, which sums its writes in ``seconds``.

    ``marks`` holds the points ``snakeddp.train`` sets itself (``main``, ``checked``, ``trainer_built``,
    ``met``: the ranks' meeting done), which split start-up.
    """

    def __init__(self, checkpoints: Any) -> None:
        self.checkpoints = checkpoints
        self.started = process_started()
        self.marks: dict[str, float] = {}
        self.spent = dict.fromkeys(CHARGED, 0.0)
        self._phase, self._since, self._written = "startup_s", self.started, checkpoints.seconds

    def _charged(self, now: float, written: float) -> dict[str, float]:
        """``spent`` with the phase under way charged up to ``now``, its checkpoint writes (the writer's total
        ``written`` then) taken out of it."""
        writes = written - self._written
        spent = {**self.spent, "checkpoint_s": self.spent["checkpoint_s"] + writes}
        spent[self._phase] += now - self._since - writes
        return spent

    def _enter(self, phase: str) -> None:
        now, written = time.perf_counter(), self.checkpoints.seconds
        self.spent = self._charged(now, written)
        self._phase, self._since, self._written = phase, now, written

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._phase == "startup_s":  # the first step
            self._enter("train_loop_s")

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._phase == "epoch_ends_s":  # the first epoch's start is start-up's: until its first step
            self._enter("train_loop_s")

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._enter("validation_s")

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._enter("train_loop_s")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._enter("epoch_ends_s")

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._enter("teardown_s")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._enter("teardown_s")

    def record(self) -> dict[str, float]:
        """``timing.phases`` of this attempt, up to now (the phase under way included)."""
        now = time.perf_counter()
        spent = self._charged(now, self.checkpoints.seconds)
        since = {name: at - self.started for name, at in self.marks.items()}
        met = since.get("met", 0.0)
        return {
            name: round(max(seconds, 0.0), 3)
            for name, seconds in {
                **spent,
                "total_s": now - self.started,
                "imports_s": since.get("main", 0.0),
                "checks_s": since.get("checked", 0.0) - since.get("main", 0.0),
                "trainer_build_s": since.get("trainer_built", 0.0) - since.get("checked", 0.0),
                "meeting_s": met - since.get("trainer_built", 0.0),
                "fit_setup_s": spent["startup_s"] - met if "met" in since else 0.0,
            }.items()
        }
