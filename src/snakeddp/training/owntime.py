"""Each rank's own time per training step, which its watch posts for the pace scores (snakeddp.cluster.pace).

DDP all-reduces the gradients during backward (a bucket as soon as its gradients are ready) and waits for all of
them before backward returns: a fast rank waits there for a slow one, the slow one hardly waits. A rank's own
time is its step, on_train_batch_start to on_train_batch_end, less that wait: from its last gradient's
accumulation (a hook on each parameter that reads the clock) to on_after_backward. It runs first among the
callbacks, so the preemption agreement's all-reduce after a step (training.callbacks.Preemption) is outside too.
So is the fetch of the next batch, between two steps, beside Lightning's own collectives there: a rank slow to
read its data is not scored by this. Per step: clock reads; the watch thread reads ``totals``. No collective.
"""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback


class OwnTime(Callback):
    """Counts this rank's training steps and their own seconds (``totals``, read by the watch thread)."""

    def __init__(self) -> None:
        self.totals: tuple[int, float] = (0, 0.0)
        """(steps, own seconds), replaced whole so another thread never reads one without the other."""
        self._started = self._grad_at = self._waited = 0.0
        self._hooks: list[Any] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._hooks = [
            p.register_post_accumulate_grad_hook(self._gradient) for p in pl_module.parameters() if p.requires_grad
        ]

    def _gradient(self, parameter: Any) -> None:
        self._grad_at = time.perf_counter()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._started, self._grad_at, self._waited = time.perf_counter(), 0.0, 0.0

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._grad_at:  # a strategy whose parameters' hooks never fire: the whole step counts as its own
            self._waited += time.perf_counter() - self._grad_at

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        steps, own = self.totals
        self.totals = (steps + 1, own + max(time.perf_counter() - self._started - self._waited, 0.0))

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
