"""last.ckpt holds the end of the last finished epoch, whatever save_top_k keeps; no half-written saves remain; a
stop at an epoch's end waits for its checkpoints."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from snakeddp.run.layout import FINISHED
from snakeddp.util.hashing import sha256_file
from tests.helpers import assert_valid_provenance, launch, prepare, subprocess_env

EPOCHS = 6


@pytest.mark.e2e
@pytest.mark.parametrize("save_top_k", [0, 1, None])
def test_last_checkpoint_holds_the_final_epoch(tmp_path, save_top_k):
    # A learning rate this high makes val_loss go up and down, so the final epoch is rarely a top-k one.
    trainer = {"max_epochs": EPOCHS, "early_stopping": {"enabled": False}}
    if save_top_k is not None:
        trainer["save_top_k"] = save_top_k
    run_yaml, manifest, run_dir = prepare(tmp_path, {"trainer": trainer, "model": {"lr": 0.5}})
    done = launch(run_yaml, manifest, run_dir, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    last = run_dir / "checkpoints" / "last.ckpt"
    # Our own file, and weights_only refuses anything but tensors and plain containers.
    state = torch.load(last, weights_only=True)
    assert state["epoch"] == EPOCHS - 1
    (record,) = assert_valid_provenance(tmp_path)
    assert record["training"]["last_checkpoint"]["sha256"] == sha256_file(last)
    top_k = sorted(p.name for p in last.parent.glob("epoch*.ckpt"))
    assert len(top_k) == (2 if save_top_k is None else save_top_k), top_k
    if top_k:  # named with the epoch counted from 1, as the terminal and the report count it
        best = record["training"]["best_checkpoint"]["path"]
        assert best.startswith(f"checkpoints/epoch{record['training']['best_epoch'] + 1:03d}-val_loss"), best


# A checkpoint save as AtomicCheckpointIO does it (fsutil.atomic_write), that never finishes.
SLOW_SAVE = """
import sys, time
from snakeddp.util.fsutil import atomic_write

atomic_write(sys.argv[1], lambda handle: (handle.write(b"half a checkpoint"), handle.flush(), time.sleep(600)))
"""


@pytest.mark.e2e
def test_a_finished_attempt_removes_what_a_save_killed_midway_left(tmp_path):
    run_yaml, manifest, run_dir = prepare(tmp_path, {"trainer": {"max_epochs": 1}})
    done = launch(run_yaml, manifest, run_dir, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    checkpoints = run_dir / "checkpoints"
    saving = subprocess.Popen([sys.executable, "-c", SLOW_SAVE, str(checkpoints / "last.ckpt")], env=subprocess_env())
    deadline = time.monotonic() + 60
    while not list(checkpoints.glob(".last.ckpt.*.partial")):
        assert saving.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    saving.send_signal(signal.SIGKILL)
    saving.wait()
    (leftover,) = checkpoints.glob(".last.ckpt.*.partial")

    # The same run again, as after a node lost before the attempt was recorded as finished: it
    # resumes in place, finishes, and cleans up. (A finished attempt would be restored untouched.)
    for record in (run_dir / "provenance.json", run_dir / FINISHED):
        record.unlink()
    done = launch(run_yaml, manifest, run_dir, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resuming from" in done.stdout and not (run_dir / "attempts").exists()
    assert not leftover.exists()
    assert [p.name for p in checkpoints.iterdir() if p.name.startswith(".")] == []
    assert torch.load(checkpoints / "last.ckpt", weights_only=True)["epoch"] == 0


@pytest.mark.e2e
def test_the_checkpoint_callback_keeps_lightnings_state_key(tmp_path):
    # Checkpoints store the callback's state under this key: built once, it must stay the key
    # Lightning would build, or resuming an older last.ckpt would drop the callback's state.
    from lightning.pytorch.callbacks import ModelCheckpoint

    from snakeddp.training.checkpoints import EpochCheckpoint

    callback = EpochCheckpoint(dirpath=tmp_path, monitor="val_loss", mode="min", save_top_k=2)
    assert callback.state_key == ModelCheckpoint.state_key.fget(callback)
    assert callback.state_key.startswith("EpochCheckpoint{") and "'monitor': 'val_loss'" in callback.state_key
    assert callback.state_key is callback.state_key


@pytest.fixture
def ctrl_c_raises():
    """SIGINT as a rank has it (Python's KeyboardInterrupt), whatever this process inherited (nohup ignores it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_stop_at_an_epochs_end_is_held_until_its_checkpoints_are_saved_then_comes_as_it_came(ctrl_c_raises):
    """tests/e2e/test_training.py's Ctrl-C lands there in a real run; here, what HeldStops does with each handler."""
    from snakeddp.training.checkpoints import HeldStops

    def flag(signum, frame):  # Preemption's handler: only raises a flag, the ranks stop at a step later
        flagged.append(signum)

    flagged: list[int] = []
    preemption = signal.signal(signal.SIGUSR1, flag)
    try:
        held = HeldStops()
        held.hold()  # an epoch's end hooks begin
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, passed on by the launcher
        os.kill(os.getpid(), signal.SIGINT)  # and again: one stop
        os.kill(os.getpid(), signal.SIGUSR1)
        assert held.arrived == [signal.SIGINT] and flagged == [signal.SIGUSR1]
        assert signal.getsignal(signal.SIGUSR1) is flag, "a preemption signal is Preemption's"
        with pytest.raises(KeyboardInterrupt):
            held.release()  # its checkpoints are saved
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and not held.arrived

        held.hold()
        os.kill(os.getpid(), signal.SIGINT)
        held.on_exception(None, None, OSError(28, "No space left on device"))  # the save failed: the rank stops on it
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        held.release()  # nothing held any more
    finally:
        signal.signal(signal.SIGUSR1, preemption)


def test_a_second_ctrl_c_a_moment_after_the_first_stops_the_rank_at_once_while_its_save_is_held(
    ctrl_c_raises, monkeypatch
):
    """A save that takes long (a large model on a slow disk) is not waited for if the stop is asked for again: the
    same signal delivered twice at once (the terminal's group, and a launcher passing it on) is one stop."""
    from snakeddp.training import checkpoints
    from snakeddp.training.checkpoints import HeldStops

    now = [100.0]
    monkeypatch.setattr(checkpoints.time, "monotonic", lambda: now[0])
    held = HeldStops()
    held.hold()
    os.kill(os.getpid(), signal.SIGINT)
    now[0] += HeldStops.AGAIN_AFTER_S / 2
    os.kill(os.getpid(), signal.SIGINT)  # the same Ctrl-C, delivered again
    assert held.arrived == [signal.SIGINT]
    now[0] += HeldStops.AGAIN_AFTER_S
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)  # asked again: now
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and not held.arrived
    held.release()  # the save ends nothing more
