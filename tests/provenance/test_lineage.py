"""Which finished attempt a run takes over: a shorter budget to continue, an early stop to restore, the
same key kept by another run; on real run directories (the shared sweep's devices-1, copied)."""

from __future__ import annotations

import builtins
import copy
import csv
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from snakeddp.errors import RunStateError
from snakeddp.provenance import lineage
from snakeddp.provenance.schema import validate
from snakeddp.run import attempt, prune, status
from snakeddp.run.runfile import RunFile
from snakeddp.run.runs import load_run, resolve_run
from snakeddp.util import hashing

pytestmark = pytest.mark.e2e  # the records and checkpoints come from the shared sweep


@pytest.fixture
def made(sweep_workflow):
    """A real finished run directory, and a way to lay out copies of it as attempts of other budgets."""
    source = sweep_workflow.directory / "results" / "runs" / "devices-1"
    record = json.loads((source / "provenance.json").read_text())
    config = RunFile.load(source / "run.yaml").config
    identity = attempt.Identity(config, data_sha256="d" * 64, environment_hash="e", user_code={})

    def lay_out(folder, max_epochs, status="completed", epochs=None, key=None, current=False, finished_at=None):
        """``folder`` holding the devices-1 attempt as if trained at ``max_epochs`` (and finished at ``finished_at``,
        else when devices-1 did); returns its record."""
        key = key or identity.key_at(max_epochs)
        shutil.copytree(source / "checkpoints", folder / "checkpoints")
        shutil.copy(source / "metrics.csv", folder / "metrics.csv")
        kept = copy.deepcopy(record)
        kept["config"]["trainer"]["max_epochs"] = max_epochs
        kept.update(origin_sha256=key, status=status, attempt={"id": key[:12], "restored": False})
        kept["training"].update(max_epochs=max_epochs, epochs_completed=epochs or max_epochs)
        kept["training"]["epochs_from"] = [{"attempt": key[:12], "first_epoch": 1, "last_epoch": epochs or max_epochs}]
        kept["training"]["stopped_early"] = status == "early_stopped"
        kept["timing"]["finished_at"] = finished_at or kept["timing"]["finished_at"]
        validate(kept)
        (folder / ("finished.json" if current else "provenance.json")).write_text(json.dumps(kept))
        (folder / "run-state.json").write_text(json.dumps({"resume_key": key}))
        return kept

    return identity, lay_out


# Before devices-1 finished: an attempt laid out finished at it is older than one laid out at devices-1's time.
EARLIER = "2020-01-01T00:00:00+00:00"


def at(identity, max_epochs):
    config = copy.deepcopy(dict(identity.run_config))
    config["trainer"] = {**config["trainer"], "max_epochs": max_epochs}
    return attempt.Identity(config, identity.data_sha256, identity.environment_hash, identity.user_code)


def test_a_higher_budget_continues_the_longest_finished_one_and_keeps_it(tmp_path, made):
    identity, lay_out = made
    run_dir = tmp_path / "runs" / "r"
    lay_out(run_dir / "attempts" / "two", 2)
    three = lay_out(run_dir, 3, current=True)
    lay_out(tmp_path / "runs" / "another" / "attempts" / "four", 4)  # another run's: its own run's come first
    five = at(identity, 5)
    start = lineage.prepare(run_dir, five, RunFile("r", five.run_config))
    assert start.origin.how == lineage.CONTINUE and start.origin.record["origin_sha256"] == three["origin_sha256"]
    assert start.resume == run_dir / "checkpoints" / "last.ckpt" and not attempt.finished(run_dir)
    kept = run_dir / "attempts" / three["attempt"]["id"]
    assert json.loads((kept / "provenance.json").read_text()) == three, "the 3-epoch attempt is kept whole"
    assert (kept / "checkpoints" / "last.ckpt").read_bytes() == start.resume.read_bytes()
    assert attempt.inherited_epochs(run_dir) == three["training"]["epochs_from"]
    assert start.origin.continuing("r", 5) == f"continuing attempt {three['attempt']['id']} (epochs 1-3) from epoch 4/5"


def test_an_early_stop_within_the_budget_is_its_result_and_is_restored_saying_so(tmp_path, made):
    identity, lay_out = made
    run_dir = tmp_path / "runs" / "r"
    lay_out(run_dir / "attempts" / "three", 3)
    stopped = lay_out(run_dir / "attempts" / "eight", 8, status="early_stopped", epochs=4)
    five = at(identity, 5)
    start = lineage.prepare(run_dir, five, RunFile("r", five.run_config, {"trainer.max_epochs": 5}))
    assert start.origin.how == lineage.STOPPED_EARLY and start.resume is None and attempt.finished(run_dir)
    # What the last try left in status.json: another attempt's, at another budget.
    status.write(run_dir, "done", writer="rank 0", epoch=12, max_epochs=12, step=192, total_steps=192)
    line = lineage.restore(run_dir, five.key)
    said = status.read(run_dir)  # `snakeddp status` says the restored attempt's, none of the other's
    assert (said["state"], said["epoch"], said["max_epochs"], said.get("step")) == ("done", 4, 5, None), said
    assert said["detail"] == f"restored attempt {five.key[:12]}, nothing trained", said
    assert line == (
        f"attempt {stopped['attempt']['id']} stopped early at epoch 4, within max_epochs 5, so this budget stops "
        f"there too: restored it as attempt {five.key[:12]}, nothing trained"
    )
    record = json.loads((run_dir / "provenance.json").read_text())
    validate(record)
    assert record["origin_sha256"] == five.key and record["training"]["max_epochs"] == 5
    assert record["sweep_point"] == {"trainer.max_epochs": 5} and record["config"]["trainer"]["max_epochs"] == 5
    assert record["attempt"]["restored_from"] == {
        "run": "r",
        "attempt": stopped["attempt"]["id"],
        "why": "stopped_early",
    }
    assert record["training"]["epochs_from"] == stopped["training"]["epochs_from"]
    assert lineage.find(run_dir, at(identity, 3)) is None, "a budget below the early stop has nothing to take over"


def test_a_budget_that_does_not_continue_retrains(tmp_path, made):
    identity, lay_out = made
    run_dir = tmp_path / "runs" / "r"
    lay_out(run_dir / "attempts" / "three", 3)
    config = copy.deepcopy(dict(identity.run_config))
    config["trainer"] = {**config["trainer"], "max_epochs": 5, "budget_continues": False}
    fixed = attempt.Identity(config, identity.data_sha256, identity.environment_hash, identity.user_code)
    assert lineage.find(run_dir, fixed) is None
    other_data = attempt.Identity(config | {"trainer": at(identity, 5).run_config["trainer"]}, "0" * 64, "e", {})
    assert lineage.find(run_dir, other_data) is None, "another dataset is another lineage"


def test_the_same_key_kept_by_another_run_is_restored_as_a_copy(tmp_path, made):
    identity, lay_out = made
    runs = tmp_path / "runs"
    theirs = lay_out(runs / "lr-0.003", 3, current=True)
    renamed = runs / "base"
    start = lineage.prepare(renamed, identity, RunFile("base", identity.run_config))
    assert start.origin.how == lineage.SAME_KEY and attempt.finished(renamed)
    status.write(renamed, "failed", writer="launcher")  # what a failed try of this run left
    line = lineage.restore(renamed, identity.key)
    assert status.read(renamed)["state"] == "done", "`snakeddp status` says the run is done"
    assert line == (
        f"attempt {identity.key[:12]} already finished with this config, data and environment in run lr-0.003 "
        "(3 epochs): restored a copy, nothing trained"
    )
    record = json.loads((renamed / "provenance.json").read_text())
    assert record["run_id"] == "base" and record["attempt"]["restored_from"]["run"] == "lr-0.003"
    assert record["training"]["checkpoints"] == theirs["training"]["checkpoints"], "the same files, copied"
    assert json.loads((runs / "lr-0.003" / "finished.json").read_text()) == theirs, "the other run keeps its own"
    assert (runs / "lr-0.003" / "checkpoints" / "last.ckpt").is_file()


def test_records_that_do_not_match_the_schema_and_links_out_of_results_runs_are_passed_over(tmp_path, made):
    identity, lay_out = made
    runs = tmp_path / "runs"
    damaged = runs / "damaged"
    lay_out(damaged, 3, current=True)
    record = json.loads((damaged / "finished.json").read_text())
    del record["training"]
    (damaged / "finished.json").write_text(json.dumps(record))
    lay_out(tmp_path / "elsewhere", 3, current=True)
    runs.joinpath("linked").symlink_to(tmp_path / "elsewhere")
    assert lineage.find(runs / "base", identity) is None
    lay_out(tmp_path / "outside" / "r", 3, current=True)
    assert lineage.find(tmp_path / "outside" / "new", identity) is None, "only a results/runs folder is searched"


def test_a_finished_record_that_does_not_match_the_schema_stops_with_one_line(tmp_path, made):
    identity, lay_out = made
    lay_out(tmp_path, 3, current=True)
    (tmp_path / "finished.json").write_text('{"run_id": "r"}')
    with pytest.raises(RunStateError) as stopped:
        lineage.restore(tmp_path, identity.key)
    (line,) = str(stopped.value).splitlines()
    assert "does not match the provenance schema" in line and line.count("HINT: move it aside") == 1, line


def test_a_shorter_budget_is_scored_on_a_longer_attempts_first_epochs_without_a_checkpoint(tmp_path, made):
    identity, lay_out = made
    run_dir = tmp_path / "runs" / "r"
    three = lay_out(run_dir / "attempts" / "three", 3)
    two = at(identity, 2)
    origin = lineage.longer(run_dir, two)
    assert origin.how == lineage.LONGER_BUDGET and origin.record == three
    record = lineage.truncated(origin, two, RunFile("r", two.run_config))
    validate(record)
    rows = [row for row in csv.DictReader((run_dir / "attempts" / "three" / "metrics.csv").open())][:2]
    best = min(rows, key=lambda row: float(row["val_loss"]))
    assert record["training"]["best_score"] == float(best["val_loss"]) and record["training"]["best_epoch"] == int(
        best["epoch"]
    )
    assert (record["training"]["max_epochs"], record["training"]["epochs_completed"]) == (2, 2)
    assert record["training"]["checkpoints"] == [] and record["training"]["best_checkpoint"] is None
    assert record["attempt"]["restored_from"] == {"run": "r", "attempt": three["attempt"]["id"], "why": "longer_budget"}
    # Whether the reused epochs are this budget's exactly: the longer attempt's record says (a CPU run: yes).
    assert three["training"]["deterministic"] is True
    assert record["training"]["scored_from_longer"] == {
        "attempt": three["attempt"]["id"],
        "max_epochs": 3,
        "deterministic": True,
    }
    assert lineage.longer(run_dir, at(identity, 3)) is None, "its own budget is restored, not scored"


def test_a_longer_attempt_whose_metrics_lack_epochs_stops_and_its_hint_lets_the_rung_train(tmp_path, made):
    identity, lay_out = made
    run_dir = tmp_path / "runs" / "r"
    lay_out(run_dir / "attempts" / "eight", 8)  # says 8 epochs, its metrics.csv holds 3
    five = at(identity, 5)
    origin = lineage.longer(run_dir, five)
    with pytest.raises(RunStateError, match=r"does not hold epochs 1-5 .* HINT: move that attempt's folder aside"):
        lineage.truncated(origin, five, RunFile("r", five.run_config))
    shutil.move(run_dir / "attempts" / "eight", tmp_path / "aside")  # as the HINT says
    assert lineage.longer(run_dir, five) is None and lineage.find(run_dir, five) is None, "the rung trains"


@pytest.mark.parametrize(
    "damage",
    [
        lambda record: [record],  # not an object
        lambda record: {**record, "training": "three epochs"},
        lambda record: {**record, "training": {**record["training"], "max_epochs": True}},
        lambda record: {**record, "training": {**record["training"], "max_epochs": 3, "epochs_completed": "3"}},
    ],
    ids=["list", "training-not-an-object", "max-epochs-a-bool", "schema-invalid"],
)
def test_a_malformed_record_in_another_run_is_passed_over_and_a_valid_one_still_found(tmp_path, made, damage):
    """Records are read before they are validated (only those whose key could be this run's are): a
    damaged one, whatever its shape, is never taken over and never stops the search for a valid one."""
    identity, lay_out = made
    damaged = lay_out(tmp_path / "runs" / "broken", 3, current=True)
    (tmp_path / "runs" / "broken" / "finished.json").write_text(json.dumps(damage(damaged)))
    valid = lay_out(tmp_path / "runs" / "kept", 3, current=True)
    five = at(identity, 5)
    origin = lineage.find(tmp_path / "runs" / "r", five)
    assert origin is not None and origin.run_id == "kept" and origin.record == valid


def test_a_finished_attempt_whose_checkpoints_were_pruned_is_set_aside_not_restored_and_the_run_trains(
    tmp_path, made, capsys
):
    """Its config put back, a pruned attempt was "restored, nothing trained" with no checkpoint at all."""
    identity, lay_out = made
    run_dir, three = tmp_path / "runs" / "r", at(identity, 3)
    kept_id = three.key[:12]
    record = lay_out(run_dir / "attempts" / kept_id, 3)
    lay_out(run_dir, 4, current=True)  # the run's attempt now: another budget, longer (nothing to continue)
    # Pruned while the run's current attempt was its model (provenance.json: else the 3-epoch one is, and stays).
    shutil.copy(run_dir / "finished.json", run_dir / "provenance.json")
    (removed,) = prune.prune([run_dir], best=0, last=0, dry_run=False)
    assert removed.path == run_dir / "attempts" / kept_id / "checkpoints"
    (run_dir / "provenance.json").unlink()  # what Snakemake does before the train job of the config put back
    assert not attempt.restorable(run_dir, three.key), "a remote job's launcher asks this before it restores"

    start = lineage.prepare(run_dir, three, RunFile("r", three.run_config))
    assert start == lineage.Start(None, None) and not attempt.finished(run_dir), "it trains from epoch 1"
    aside = run_dir / "attempts" / f"{kept_id}-pruned"
    assert json.loads((aside / "provenance.json").read_text()) == record and (aside / "pruned.json").is_file()
    assert (aside / "metrics.csv").is_file() and not (run_dir / "attempts" / kept_id).exists()
    assert sorted(path.name for path in run_dir.iterdir()) == [".attempt.lock", "attempts", "run-state.json"]
    (line,) = capsys.readouterr().err.splitlines()
    day = json.loads((aside / "pruned.json").read_text())["pruned_at"][:10]
    assert line == (
        f"r: attempt {kept_id} finished with this config (3 epochs), but its checkpoints were pruned by `snakeddp "
        f"prune` on {day}: not restored; its record stays, as r@{kept_id}-pruned, and the run trains from epoch 1"
    )
    assert load_run(aside).label == f"devices-1@{kept_id}-pruned"
    assert resolve_run(f"r@{kept_id}-p", tmp_path).run_dir == aside, "named as `runs --all` shows it"


def test_a_pruned_attempt_of_a_shorter_budget_is_not_continued_and_the_next_one_is(tmp_path, made, capsys):
    identity, lay_out = made
    run_dir = tmp_path / "runs" / "r"
    three = lay_out(run_dir / "attempts" / "three", 3, finished_at=EARLIER)
    two = lay_out(run_dir / "attempts" / "two", 2)  # the run's last finished attempt, its only model: kept
    (removed,) = prune.prune([run_dir], best=0, last=0, dry_run=False)
    assert removed.path == run_dir / "attempts" / "three" / "checkpoints"
    five = at(identity, 5)
    start = lineage.prepare(run_dir, five, RunFile("r", five.run_config))
    assert start.origin.record == two and start.resume == run_dir / "checkpoints" / "last.ckpt"
    assert start.resume.is_file()
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"r: attempt {three['attempt']['id']} (3 epochs) is not continued: its checkpoints were ")
    assert line.endswith(f"; the run continues attempt {two['attempt']['id']} from epoch 3 instead"), line


def test_the_same_key_pruned_in_another_run_is_not_restored_as_a_copy(tmp_path, made, capsys):
    identity, lay_out = made
    runs = tmp_path / "runs"
    theirs = lay_out(runs / "lr-0.003" / "attempts" / identity.key[:12], 3, key=identity.key, finished_at=EARLIER)
    lay_out(runs / "lr-0.003" / "attempts" / "four", 4)  # that run's last finished attempt, its only model: kept
    (removed,) = prune.prune([runs / "lr-0.003"], best=0, last=0, dry_run=False)
    assert removed.path == runs / "lr-0.003" / "attempts" / identity.key[:12] / "checkpoints"
    start = lineage.prepare(runs / "base", identity, RunFile("base", identity.run_config))
    assert start == lineage.Start(None, None) and not attempt.finished(runs / "base")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"base: attempt {theirs['attempt']['id']} of run lr-0.003 (3 epochs) is not restored: ")
    assert line.endswith("; the run trains from epoch 1"), line


def test_a_restore_without_the_checkpoints_its_record_lists_stops_with_one_line_and_its_hint_trains(
    tmp_path, made, capsys
):
    identity, lay_out = made
    run_dir = tmp_path / "runs" / "r"
    lay_out(run_dir, 3, key=identity.key, current=True)
    (run_dir / "checkpoints" / "last.ckpt").unlink()
    with pytest.raises(RunStateError) as stopped:
        lineage.restore(run_dir, identity.key)
    (line,) = str(stopped.value).splitlines()
    assert "its checkpoints/last.ckpt is missing, so it is not restored without its model. HINT: rerun its" in line
    assert not (run_dir / "provenance.json").exists()
    # The forced train job, as the HINT says: its launcher prepares the attempt, which is kept and trains again.
    start = lineage.prepare(run_dir, identity, RunFile("r", identity.run_config))
    assert start == lineage.Start(None, None) and not attempt.finished(run_dir)
    kept = run_dir / "attempts" / f"{identity.key[:12]}-damaged"
    assert (kept / "provenance.json").is_file() and (kept / "metrics.csv").is_file()
    assert "its checkpoints/last.ckpt is missing: not restored; its record stays, as r@" in capsys.readouterr().err


def test_a_finished_attempt_whose_checkpoint_changed_is_not_restorable(tmp_path, made):
    """What a remote platform's launcher asks before it restores without submitting (remote.job)."""
    identity, lay_out = made
    run_dir = tmp_path / "runs" / "r"
    lay_out(run_dir, 3, key=identity.key, current=True)
    assert attempt.restorable(run_dir, identity.key)
    last = run_dir / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:-1])
    assert not attempt.restorable(run_dir, identity.key)


def test_a_restore_reads_each_checkpoint_once_and_still_refuses_one_changed_between_its_checks(
    tmp_path, made, monkeypatch
):
    """A launcher asks restorable, then prepares (its attempt moved back first where kept): both hashed every
    checkpoint, 1 s per GB each. Read once now; a checkpoint written in between (same size, mtime put back) is
    still read again and refused."""
    identity, lay_out = made
    unchanged, changed = tmp_path / "a" / "runs" / "r", tmp_path / "b" / "runs" / "r"
    lay_out(unchanged / "attempts" / identity.key[:12], 3, key=identity.key)
    lay_out(unchanged, 4, current=True)  # another attempt holds the run directory: restorable looks under attempts/
    lay_out(changed, 3, key=identity.key, current=True)
    time.sleep(hashing.RACY_S)  # the copies were just written: a file younger than this is read at every ask
    read = []
    real_open = builtins.open

    def counting_open(file, mode="r", *args, **kwargs):
        if str(file).endswith(".ckpt") and "r" in mode:
            read.append(Path(file).name)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    assert attempt.restorable(unchanged, identity.key)
    assert lineage.prepare(unchanged, identity, RunFile("r", identity.run_config)).origin is None
    assert attempt.finished(unchanged), "restored: nothing to train"
    assert sorted(read) == sorted(path.name for path in (unchanged / "checkpoints").glob("*.ckpt")), read

    assert attempt.restorable(changed, identity.key)
    last = changed / "checkpoints" / "last.ckpt"
    stamps = last.stat()
    flipped = bytearray(last.read_bytes())
    flipped[-1] ^= 0xFF
    last.write_bytes(bytes(flipped))
    os.utime(last, ns=(stamps.st_atime_ns, stamps.st_mtime_ns))
    assert (last.stat().st_size, last.stat().st_mtime_ns) == (stamps.st_size, stamps.st_mtime_ns)
    assert lineage.prepare(changed, identity, RunFile("r", identity.run_config)) == lineage.Start(None, None)
    assert not attempt.finished(changed), "not restored: it trains again"
    assert (changed / "attempts" / f"{identity.key[:12]}-damaged" / "provenance.json").is_file()
