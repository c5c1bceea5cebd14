"""Which checkpoint a run resumes from, and the lock that keeps two attempts apart."""

import errno
import fcntl
import os

import pytest
from conftest import SRC, assert_valid_provenance
from launching import launch, prepare

from snakeddp.run import attempt as runstate


def test_fresh_run_has_nothing_to_resume(tmp_path):
    assert runstate.prepare(tmp_path, "k1") is None
    assert runstate.resume_checkpoint(tmp_path, "k1") is None


def test_same_key_resumes_from_last(tmp_path):
    runstate.prepare(tmp_path, "k1")
    last = tmp_path / "checkpoints" / "last.ckpt"
    last.parent.mkdir()
    last.write_bytes(b"x")
    assert runstate.prepare(tmp_path, "k1") == last
    assert runstate.resume_checkpoint(tmp_path, "k1") == last


def test_changed_key_moves_the_old_attempt_aside(tmp_path):
    runstate.prepare(tmp_path, "old-key")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"old")
    (tmp_path / "metrics.csv").write_text("epoch\n0\n")
    assert runstate.prepare(tmp_path, "new-key") is None
    superseded = list((tmp_path / "superseded").iterdir())
    assert len(superseded) == 1 and superseded[0].name.endswith("-old-key")
    assert (superseded[0] / "checkpoints" / "last.ckpt").read_bytes() == b"old", "nothing is deleted"
    assert not (tmp_path / "metrics.csv").exists()


def test_ranks_refuse_checkpoints_of_another_key(tmp_path):
    runstate.prepare(tmp_path, "k1")
    with pytest.raises(runstate.RunStateError, match="different config, data or environment"):
        runstate.resume_checkpoint(tmp_path, "k2")


def test_checkpoint_without_state_is_not_trusted(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"?")
    with pytest.raises(runstate.RunStateError, match="cannot be told what it was trained from"):
        runstate.resume_checkpoint(tmp_path, "k1")


def test_a_live_attempt_blocks_a_new_one(tmp_path):
    fd = runstate.hold_attempt_lock(tmp_path)
    assert fd is not None
    with pytest.raises(runstate.RunStateError, match="still training"):
        runstate.prepare(tmp_path, "k1")
    os.close(fd)
    assert runstate.prepare(tmp_path, "k1") is None


def no_flock(fd, operation):
    raise OSError(errno.ENOLCK, "No locks available")


def test_a_file_system_without_flock_is_warned_about_once(tmp_path, monkeypatch, capsys):
    # A file system without flock cannot be mounted in a test; its error is what fcntl raises there.
    monkeypatch.setattr(fcntl, "flock", no_flock)
    assert runstate.prepare(tmp_path, "k1") is None
    assert runstate.hold_attempt_lock(tmp_path) is None
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"snakeddp: warning: {runstate.no_lock_warning(tmp_path)}"
    assert "does not support flock" in line


@pytest.mark.e2e
def test_training_without_flock_warns_in_the_log_and_records_it_in_provenance(tmp_path):
    # Every process of the run (launcher, torchrun, both ranks) imports this sitecustomize.
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import errno, fcntl\n\n\ndef no_flock(fd, operation):\n"
        "    raise OSError(errno.ENOLCK, 'No locks available')\n\n\nfcntl.flock = no_flock\n"
    )
    run_yaml, manifest, run_dir = prepare(tmp_path, {"trainer": {"max_epochs": 1}, "launch": {"devices": 2}})
    done = launch(run_yaml, manifest, run_dir, cwd=tmp_path, PYTHONPATH=os.pathsep.join([str(hooks), str(SRC)]))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert output.count("does not support flock") == 1, output[-3000:]
    (record,) = assert_valid_provenance(tmp_path)
    assert record["warnings"] == [runstate.no_lock_warning(run_dir)]
