"""The shim that hands SIGTERM to Preemption: applied on the Lightning it was written for, refused on others."""

import lightning
import lightning.pytorch as pl
import pytest

from snakeddp.training import sigterm_shim


def test_written_for_the_pinned_lightning():
    assert lightning.__version__ in sigterm_shim.WRITTEN_FOR


def test_drops_the_per_step_broadcast_and_the_notifier_of_this_trainer_only():
    trainer, other = pl.Trainer(logger=False), pl.Trainer(logger=False)
    sigterm_shim.hand_sigterm_to_preemption(trainer)
    assert trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor() is None
    assert trainer._signal_connector._sigterm_notifier_fn(15, None) is None
    assert not trainer.received_sigterm
    assert other.fit_loop.epoch_loop._broadcast_sigterm_tensor.__func__.__module__.startswith("lightning")


def test_refuses_another_lightning_version():
    with pytest.raises(sigterm_shim.LightningVersionError, match=r"found 2\.7\.0\. HINT: install the pinned"):
        sigterm_shim.hand_sigterm_to_preemption(pl.Trainer(logger=False), version="2.7.0")
