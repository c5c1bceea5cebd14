"""Which checkpoint a run resumes from, and the lock that keeps two attempts apart."""

import errno
import fcntl
import json
import os
import sys

import pytest

from snakeddp.run import attempt as runstate
from snakeddp.run import usercode
from snakeddp.util.hashing import sha256_file
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
    assert runstate.resumable(tmp_path, key_b) is None
    runstate.prepare(tmp_path, key_b)
    assert not runstate.finished(tmp_path), "the new key trains"
    stored = tmp_path / "attempts" / ("a" * 12)
    assert json.loads((stored / "provenance.json").read_text())["run_id"] == "r"
    assert runstate.resumable(tmp_path, key_a) == stored / "checkpoints/last.ckpt"
    finish(tmp_path, key_b)
    (tmp_path / "provenance.json").unlink()
    assert runstate.prepare(tmp_path, key_a) == tmp_path / "checkpoints" / "last.ckpt"
    assert runstate.finished(tmp_path), "then provenance.lineage.restore publishes its record"
    assert (tmp_path / "checkpoints" / "last.ckpt").read_bytes() == key_a.encode()
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


def test_attempt_key_follows_the_users_modules_the_model_imports_and_not_installed_ones(tmp_path, monkeypatch):
    """Layers built in another file of the user's package (a namespace package, relative and absolute imports,
    a parent package's __init__): an edit there changes the weights' shapes, so it is another attempt. An
    installed package's module (lightning's) is the environment record's, and nothing is imported to find them."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    package = tmp_path / "keypkg"
    (package / "nets").mkdir(parents=True)
    (package / "nets" / "__init__.py").write_text("")
    (package / "nets" / "model.py").write_text(
        "import lightning.pytorch as pl\nfrom .parts import body\nfrom keypkg import widths\nclass Net: pass\n"
    )
    (package / "nets" / "parts.py").write_text("def body(): return 32\n")
    (package / "widths.py").write_text("WIDTH = 32\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = {"data": {}, "model": {"target": "keypkg.nets.model:Net"}}
    key = runstate.attempt_key(config, manifest, None)
    assert "keypkg" not in sys.modules, "found, not imported"
    for edited in ("nets/parts.py", "widths.py", "nets/__init__.py"):
        before = (package / edited).read_text()
        (package / edited).write_text(before + "# edited\n")
        assert runstate.attempt_key(config, manifest, None) != key, edited
        (package / edited).write_text(before)
        assert runstate.attempt_key(config, manifest, None) == key, edited
    files = usercode.user_files("keypkg.nets.model")
    assert set(files) == {"keypkg.nets.model", "keypkg.nets.parts", "keypkg.nets", "keypkg.widths"}, files


def test_a_module_that_imports_none_of_the_users_keeps_the_key_it_had(tmp_path, monkeypatch):
    """Its file's sha256, as before imports were followed: an interrupted run of such a model resumes after the
    upgrade."""
    module = tmp_path / "alone_for_key.py"
    module.write_text("import torch\nclass Net: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = {"data": {}, "model": {"target": "alone_for_key:Net"}}
    assert runstate.user_modules_sha256(config) == {"model.target": sha256_file(module)}


def identity(**trainer):
    config = {"seed": 1, "data": {}, "model": {"lr": 0.1}, "trainer": {"max_epochs": 3, **trainer}, "launch": {}}
    return runstate.Identity(config, data_sha256="d" * 64, environment_hash="e", user_code={})


def test_the_budget_has_a_key_of_its_own_and_the_run_knows_its_key_at_any_other_budget():
    three = identity()
    five = identity(max_epochs=5)
    assert three.key != five.key, "each budget is its own attempt (coming back to one restores it)"
    assert three.key_at(5) == five.key and five.key_at(3) == three.key and three.key_at(3) == three.key
    assert identity(budget_continues=True).key == three.key, "whether budgets continue is not what a run computes"


def test_a_budget_that_does_not_continue_has_no_lineage():
    assert identity(budget_continues=False).key_at(5) is None
    own = runstate.Identity(
        {"model": {"target": "mine:Net"}, "trainer": {"max_epochs": 3}}, "d" * 64, None, {"model.target": None}
    )
    assert own.key_at(5) is None, "a model.target may schedule over max_epochs: retrain unless it says otherwise"
    chosen = {"model": {"target": "mine:Net"}, "trainer": {"max_epochs": 3, "budget_continues": True}}
    assert runstate.Identity(chosen, "d" * 64, None, {}).key_at(5) is not None


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{not json", "not JSON"),
        ('{"resume_key": 3}', "resume_key: 3 is not of type 'string'"),
        ('{"resume_key": "k1", "epochs_from": [{"attempt": "x"}]}', "epochs_from.0"),
    ],
)
def test_a_run_state_snakeddp_did_not_write_stops_with_one_line_and_moving_it_aside_starts_afresh(
    tmp_path, text, problem
):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"made before")
    state = tmp_path / "run-state.json"
    state.write_text(text)
    with pytest.raises(runstate.RunStateError) as stopped:
        runstate.prepare(tmp_path, "k1")
    (line,) = str(stopped.value).splitlines()
    assert problem in line and line.count("HINT:") == 1, line
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file() and state.read_text() == text, "nothing is touched"
    state.rename(tmp_path / "run-state.json.bad")  # what the HINT says
    assert runstate.prepare(tmp_path, "k1") is None, "the run starts afresh"
    assert (tmp_path / "attempts" / "unknown" / "checkpoints" / "last.ckpt").read_bytes() == b"made before"


def finished_attempt(folder, epochs=3):
    """A finished attempt's files as training leaves them: checkpoints (and a partial save), metrics, traces."""
    (folder / "checkpoints").mkdir(parents=True)
    for name in ("last.ckpt", "epoch002-val_loss0.5000.ckpt", ".last.ckpt.123.partial"):
        (folder / "checkpoints" / name).write_bytes(name.encode())
    (folder / "metrics.csv").write_text("epoch\n" + "".join(f"{e}\n" for e in range(epochs)))
    (folder / "trace").mkdir()
    (folder / "trace" / "rank-0.jsonl").write_text("{}\n")
    (folder / "tracking").mkdir()
    (folder / "tracking" / "state.json").write_text('{"mlflow_run_id": "theirs"}')
    (folder / "run-state.json").write_text('{"resume_key": "' + "a" * 64 + '"}')
    (folder / "provenance.json").write_text("{}")
    return runstate.AttemptPaths(folder)


def test_a_continued_attempt_is_a_copy_of_the_finished_one_that_keeps_its_own_files(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    source = finished_attempt(run_dir / "attempts" / ("a" * 12))
    runstate.prepare(run_dir, "b" * 64)
    epochs = [{"attempt": "a" * 12, "first_epoch": 1, "last_epoch": 3}]
    assert runstate.seed(run_dir, source, "b" * 64, epochs_from=epochs)
    last = run_dir / "checkpoints" / "last.ckpt"
    assert runstate.prepare(run_dir, "b" * 64) == last, "it resumes from the copied last.ckpt"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["epoch002-val_loss0.5000.ckpt", "last.ckpt"]
    assert not last.samefile(source.last_checkpoint), "a copy: Lightning rewrites last.ckpt in place"
    last.write_bytes(b"epoch 4")
    assert source.last_checkpoint.read_bytes() == b"last.ckpt" and source.provenance.is_file()
    assert (run_dir / "metrics.csv").read_text() == source.metrics.read_text()
    assert (run_dir / "trace" / "rank-0.jsonl").is_file()
    assert not (run_dir / "tracking").exists(), "the kept attempt's tracker runs are not appended to"
    assert runstate.inherited_epochs(run_dir) == epochs, "kept across prepare of the same key"
    assert not runstate.finished(run_dir)


def test_a_restored_copy_takes_the_record_it_is_given(tmp_path):
    run_dir = tmp_path / "runs" / "renamed"
    source = finished_attempt(tmp_path / "runs" / "other")
    runstate.prepare(run_dir, "a" * 64)
    assert runstate.seed(run_dir, source, "a" * 64, record={"run_id": "renamed"})
    assert runstate.finished(run_dir) and json.loads((run_dir / "finished.json").read_text()) == {"run_id": "renamed"}
    assert (run_dir / "tracking" / "state.json").is_file(), "a restore keeps everything the attempt made"
    assert (tmp_path / "runs" / "other" / "checkpoints" / "last.ckpt").is_file(), "the other run keeps its own"


def test_a_source_that_vanishes_while_copied_changes_nothing(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    runstate.prepare(run_dir, "b" * 64)
    assert not runstate.seed(run_dir, runstate.AttemptPaths(tmp_path / "gone"), "b" * 64, record={})
    assert sorted(p.name for p in run_dir.iterdir()) == [".attempt.lock", "run-state.json"]


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


def test_is_live_says_whether_an_attempt_holds_the_lock_and_creates_nothing(tmp_path):
    run_dir = tmp_path / "runs" / "a"
    assert not runstate.is_live(run_dir) and not run_dir.exists()
    fd = runstate.hold_attempt_lock(run_dir)
    assert runstate.is_live(run_dir)
    os.close(fd)
    assert not runstate.is_live(run_dir)


def test_no_live_attempt_refuses_its_block_while_an_attempt_trains_and_keeps_it_from_starting_meanwhile(tmp_path):
    fd = runstate.hold_attempt_lock(tmp_path)
    ran = []
    with pytest.raises(runstate.RunStateError, match=r"still training in .* HINT: wait for it to finish"):
        with runstate.no_live_attempt(tmp_path):
            ran.append("block")
    os.close(fd)
    assert ran == []
    with runstate.no_live_attempt(tmp_path):
        refused = r"being prepared by another launcher, or its run.yaml written\. HINT: run snakemake again"
        with pytest.raises(runstate.RunStateError, match=refused):
            runstate.hold_attempt_lock(tmp_path)
    os.close(runstate.hold_attempt_lock(tmp_path))
