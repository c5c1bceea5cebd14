"""Which checkpoint a run resumes from, and the lock that keeps two attempts apart."""

import os

import pytest

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
