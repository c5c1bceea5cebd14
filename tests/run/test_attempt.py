"""Which checkpoint a run resumes from, and the lock that keeps two attempts apart."""

import errno
import fcntl
import json
import os

import pytest

from snakeddp.run import attempt as runstate
from tests.helpers import SRC, assert_valid_provenance, launch, prepare


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


def test_changed_key_keeps_the_old_attempt_under_its_id(tmp_path):
    runstate.prepare(tmp_path, "0ld0ld0ld0ld-key")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"old")
    (tmp_path / "metrics.csv").write_text("epoch\n0\n")
    assert runstate.prepare(tmp_path, "new-key") is None
    kept = tmp_path / "attempts" / "0ld0ld0ld0ld"
    assert (kept / "checkpoints" / "last.ckpt").read_bytes() == b"old", "nothing is deleted"
    assert not (tmp_path / "metrics.csv").exists()


def finish(run_dir, key, epochs=3):
    """What rank 0 leaves when an attempt completes: its provenance.json, kept as the attempt's record."""
    runstate.prepare(run_dir, key)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(key.encode())
    (run_dir / "provenance.json").write_text(json.dumps({"run_id": "r", "training": {"epochs_completed": epochs}}))
    runstate.keep_record(run_dir)


def test_a_finished_attempt_keeps_its_provenance_and_comes_back(tmp_path):
    key_a, key_b = "a" * 64, "b" * 64
    finish(tmp_path, key_a)
    (tmp_path / "provenance.json").unlink()  # what Snakemake does before it reruns the train rule
    assert not runstate.restorable(tmp_path, key_b)
    runstate.prepare(tmp_path, key_b)
    assert not runstate.finished(tmp_path), "the new key trains"
    stored = tmp_path / "attempts" / ("a" * 12)
    assert json.loads((stored / "provenance.json").read_text())["run_id"] == "r"
    assert runstate.restorable(tmp_path, key_a)
    assert runstate.resumable(tmp_path, key_a) == stored / "checkpoints/last.ckpt"
    finish(tmp_path, key_b)
    (tmp_path / "provenance.json").unlink()
    assert runstate.prepare(tmp_path, key_a) == tmp_path / "checkpoints" / "last.ckpt"
    assert runstate.finished(tmp_path)
    assert (tmp_path / "checkpoints" / "last.ckpt").read_bytes() == key_a.encode()
    assert "attempt aaaaaaaaaaaa already finished" in runstate.restore(tmp_path, key_a)
    record = json.loads((tmp_path / "provenance.json").read_text())
    assert record["attempt"]["id"] == "a" * 12 and record["attempt"]["restored"] is True
    assert not stored.exists() and (tmp_path / "attempts" / ("b" * 12) / "provenance.json").is_file()


def test_attempt_key_leaves_scheduler_requests_out(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    config = {"seed": 1, "data": {}, "model": {"lr": 0.1}, "launch": {"devices": 2, "runtime": 10, "mem_mb": 100}}
    key = runstate.attempt_key(config, manifest, None)
    longer = {**config, "launch": {"devices": 2, "runtime": 600, "mem_mb": 9000}}
    assert runstate.attempt_key(longer, manifest, None) == key
    assert runstate.attempt_key({**config, "launch": {"devices": 1, "runtime": 10}}, manifest, None) != key
    assert runstate.attempt_key({**config, "model": {"lr": 0.2}}, manifest, None) != key


def test_attempt_key_reads_the_environment_record_hash(tmp_path):
    manifest, record = tmp_path / "manifest.json", tmp_path / "train.json"
    manifest.write_text("{}")
    record.write_text(json.dumps({"hash": "h1", "packages": {"torch": "1"}}))
    config = {"data": {}, "model": {}}
    key = runstate.attempt_key(config, manifest, record)
    assert key == runstate.attempt_key(config, manifest, {"hash": "h1"}), "only the record's hash counts"
    assert key != runstate.attempt_key(config, manifest, {"hash": "h2"})


def test_attempt_key_follows_the_users_model_code(tmp_path, monkeypatch):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    module = tmp_path / "my_model_for_key.py"
    module.write_text("class Net: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = {"data": {}, "model": {"target": "my_model_for_key:Net"}}
    key = runstate.attempt_key(config, manifest, None)
    module.write_text("class Net:\n    width = 2\n")
    assert runstate.attempt_key(config, manifest, None) != key, "edited model code never resumes old checkpoints"


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


def test_a_published_record_never_outlives_its_attempt(tmp_path):
    """launch started by hand, where Snakemake did not delete provenance.json first: it moves with its attempt."""
    finish(tmp_path, "a" * 64)
    runstate.prepare(tmp_path, "b" * 64)
    assert not (tmp_path / "provenance.json").exists()
    assert (tmp_path / "attempts" / ("a" * 12) / "provenance.json").is_file()


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
    # Every process of the run (launcher, supervisor, both ranks) imports this sitecustomize.
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
