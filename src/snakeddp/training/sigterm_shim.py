"""Turn off Lightning's own SIGTERM agreement where ``Preemption`` already does that job.

Lightning 2.5.2+ broadcasts rank 0's SIGTERM flag before every training step and reads it back
with ``.item()`` (``_TrainingEpochLoop._broadcast_sigterm_tensor``, PR #20825, for the deadlock of
issue #20806): one more collective and a host sync per step, about a third of a small model's step
on 2 CPU processes (bench/results.md, 4. Training overhead). ``Trainer(barebones=True)`` keeps it.

When SIGTERM is one of ``trainer.preempt_signals``, ``Preemption`` handles it: every rank raises a
flag, the ranks agree about once a second with one all-reduce and all stop after the same step,
which is the safety #20806 asked for. Lightning's SIGTERM notifier would also run (it wraps our
handler) and broadcast from inside the signal handler on rank 0, which only the per-step broadcast
receives; so both are turned off together, on this trainer's objects only. Private methods change
between releases, so this refuses to run on any Lightning version it was not read against.
"""

from __future__ import annotations

from typing import Any

import lightning
import lightning.pytorch as pl
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector

# Versions whose training_epoch_loop.py and signal_connector.py were read for this shim.
WRITTEN_FOR = ("2.6.6",)


class LightningVersionError(RuntimeError):
    """The installed Lightning is not one the shim was written for."""


def _check_version(version: str) -> None:
    missing = [
        name
        for cls, name in ((_TrainingEpochLoop, "_broadcast_sigterm_tensor"), (_SignalConnector, "_sigterm_notifier_fn"))
        if not callable(getattr(cls, name, None))
    ]
    if version not in WRITTEN_FOR or missing:
        raise LightningVersionError(
            f"snakeddp.training.sigterm_shim was written for lightning {', '.join(WRITTEN_FOR)}, found {version}"
            f"{f' without {missing}' if missing else ''}. HINT: install the pinned environment "
            "(make setup, from envs/requirements.lock), or read that version's training_epoch_loop.py and "
            "signal_connector.py and add it to WRITTEN_FOR."
        )


def _ignore(*args: Any) -> None:
    """Stands in for Lightning's SIGTERM broadcast and notifier: Preemption owns SIGTERM."""


def hand_sigterm_to_preemption(trainer: pl.Trainer, version: str = lightning.__version__) -> None:
    """Drop Lightning's per-step SIGTERM broadcast and its SIGTERM notifier on this trainer."""
    _check_version(version)
    trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor = _ignore
    trainer._signal_connector._sigterm_notifier_fn = _ignore
