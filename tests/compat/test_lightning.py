"""The shim that hands SIGTERM to Preemption (snakeddp.compat.lightning): applied to one trainer only.
Its refusal of Lightning releases it was not written for is tests/compat/test_compat.py's."""

import lightning.pytorch as pl

from snakeddp.compat.lightning import hand_sigterm_to_preemption


def test_drops_the_per_step_broadcast_and_the_notifier_of_this_trainer_only():
    trainer, other = pl.Trainer(logger=False), pl.Trainer(logger=False)
    hand_sigterm_to_preemption(trainer)
    assert trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor() is None
    assert trainer._signal_connector._sigterm_notifier_fn(15, None) is None
    assert not trainer.received_sigterm
    assert other.fit_loop.epoch_loop._broadcast_sigterm_tensor.__func__.__module__.startswith("lightning")
