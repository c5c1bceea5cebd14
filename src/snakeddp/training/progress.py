"""One line per epoch from rank 0, for people watching a run (``tail -f logs/train/<run>.log``,
or Snakemake's terminal on the local platform)."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from snakeddp.run.runs import BOOKKEEPING, metric_order
from snakeddp.training.callbacks import EpochMetrics
from snakeddp.util.numbers import readable
from snakeddp.util.terminal import say


def _seconds(value: float) -> str:
    minutes, seconds = divmod(round(value), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{value:.1f}s"


def epoch_line(run_id: str, row: dict, max_epochs: int, mean_epoch_s: float) -> str:
    """``run: epoch i/N  partition p  train_loss …  val_loss …  val_acc …  samples/s  s/epoch  ETA``,
    with whatever metrics the model logged (partition only for snakeddp's partitions)."""
    epoch = int(row["epoch"]) + 1
    logged = sorted((name for name in row if name not in BOOKKEEPING), key=metric_order)
    fields = [
        f"{run_id}: epoch {epoch}/{max_epochs}",
        *([f"partition {row['partition']}"] if row.get("partition") not in (None, "") else []),
        *(f"{name} {readable(row[name])}" for name in logged),
        f"{readable(row['samples_per_s'])} samples/s",
        f"{_seconds(float(row['epoch_seconds']))}/epoch",
        f"ETA {_seconds(mean_epoch_s * (max_epochs - epoch))}",
    ]
    return "  ".join(fields)


class EpochProgress(Callback):
    """Prints the row ``EpochMetrics`` has just written (so it must come after it in the callbacks).
    The ETA assumes the remaining epochs take as long as this attempt's epochs so far; early
    stopping can end the run sooner."""

    def __init__(self, run_id: str, metrics: EpochMetrics) -> None:
        self.run_id = run_id
        self.metrics = metrics
        self._epoch_seconds: list[float] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            say(
                f"{self.run_id}: training from epoch {trainer.current_epoch + 1}/{trainer.max_epochs} "
                f"on {trainer.world_size} process{'es' if trainer.world_size > 1 else ''}"
            )

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or not self.metrics.rows:
            return
        row = self.metrics.rows[-1]
        self._epoch_seconds.append(float(row["epoch_seconds"]))
        mean = sum(self._epoch_seconds) / len(self._epoch_seconds)
        say(epoch_line(self.run_id, row, trainer.max_epochs, mean))
