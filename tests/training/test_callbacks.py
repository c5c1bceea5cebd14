"""How often the ranks agree on a preemption signal: about once a second, whatever the step costs.

A fake clock stands in for time.perf_counter, so the tests check the rule (the next check comes
CHECK_EVERY_S of the slowest rank's steps later), not how busy the test machine is.

The agreement itself (one all-reduce across real ranks, every rank stopping at the same step)
is tested end to end in tests/e2e/test_training.py; here a one-rank "world" of two shows the
schedule: max over one rank's values is those values.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from snakeddp.training import callbacks
from snakeddp.training.callbacks import Preempted, Preemption


class OneRankStrategy:
    def reduce(self, tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
        assert reduce_op == "max"
        return tensor


class Clock:
    """time.perf_counter for the callback: advanced by the steps, never by the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(callbacks.time, "perf_counter", fake)
    return fake


def steps(callback: Preemption, clock: Clock, count: int, step_s: float) -> list[int]:
    """Run ``count`` steps of ``step_s`` seconds; return the steps after which the ranks agreed."""
    trainer = SimpleNamespace(world_size=2, strategy=OneRankStrategy(), global_step=0)
    module = SimpleNamespace(device=torch.device("cpu"))
    agreed = []
    for _ in range(count):
        clock.now += step_s
        trainer.global_step += 1
        before = callback.checks
        callback.on_train_batch_end(trainer, module, None, None, 0)
        if callback.checks > before:
            agreed.append(trainer.global_step)
    return agreed


@pytest.fixture
def preemption(tmp_path, clock):
    callback = Preemption(["SIGUSR1"], tmp_path / "last.ckpt")
    callback._checked_at = clock()  # what on_train_start does
    return callback


def test_cheap_steps_agree_about_once_a_second_not_every_step(preemption, clock):
    # 1/64 s steps (exact in binary): after the first step, one agreement every 64 steps = 1 s.
    assert steps(preemption, clock, 150, 1 / 64) == [1, 65, 129]


def test_slow_steps_agree_after_every_step(preemption, clock):
    preemption.CHECK_EVERY_S = 0.05
    assert steps(preemption, clock, 5, 0.1) == [1, 2, 3, 4, 5]


def test_the_gap_is_capped_however_cheap_the_steps(preemption, clock):
    cap = preemption.MAX_STEPS_BETWEEN_CHECKS
    assert steps(preemption, clock, 2 * cap + 1, 1 / 2**20) == [1, 1 + cap, 1 + 2 * cap]


def test_a_signal_stops_training_at_the_next_agreement(preemption, clock):
    assert steps(preemption, clock, 20, 1 / 64) == [1]
    preemption._handler(10, None)  # what SIGUSR1 does
    # The next agreement is step 65 of the epoch: the 45th of these steps, not the first.
    with pytest.raises(Preempted, match="after step 45$"):
        steps(preemption, clock, 1000, 1 / 64)
