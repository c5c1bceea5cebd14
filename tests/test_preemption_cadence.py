"""How often the ranks agree on a preemption signal: about once a second, whatever the step costs.

The agreement itself (one all-reduce across real ranks, every rank stopping at the same step)
is tested end to end in tests/e2e/test_training.py; here a one-rank "world" of two shows the
schedule: max over one rank's values is those values.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from snakeddp.training.callbacks import Preempted, Preemption


class OneRankStrategy:
    def reduce(self, tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
        assert reduce_op == "max"
        return tensor


def steps(callback: Preemption, count: int, step_s: float) -> None:
    trainer = SimpleNamespace(world_size=2, strategy=OneRankStrategy(), global_step=0)
    module = SimpleNamespace(device=torch.device("cpu"))
    for _ in range(count):
        time.sleep(step_s)
        trainer.global_step += 1
        callback.on_train_batch_end(trainer, module, None, None, 0)


@pytest.fixture
def preemption(tmp_path):
    callback = Preemption(["SIGUSR1"], tmp_path / "last.ckpt")
    callback._checked_at = time.perf_counter()  # what on_train_start does
    return callback


def test_cheap_steps_agree_about_once_a_second_not_every_step(preemption):
    steps(preemption, 150, 0.01)  # about 1.5 s of 10 ms steps
    assert 2 <= preemption.checks <= 6, preemption.checks


def test_slow_steps_agree_after_every_step(preemption):
    preemption.CHECK_EVERY_S = 0.05
    steps(preemption, 5, 0.1)
    assert preemption.checks == 5


def test_a_signal_stops_training_at_the_next_agreement(preemption):
    steps(preemption, 20, 0.01)
    preemption._handler(10, None)  # what SIGUSR1 does
    with pytest.raises(Preempted):
        steps(preemption, 1000, 0.001)
    assert preemption.checks >= 2
