"""A run's tries (snakeddp.run.tries): tries.json, hung.json, last.json and what the tries cost."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from snakeddp.errors import RunStateError
from snakeddp.run import tries
from snakeddp.run.layout import RunPaths

T0 = 1_750_000_000.0


def hang(node: str | None = "n2", reached: int | None = 140) -> dict:
    return {
        "kind": "stopped",
        "culprit": {"rank": 1, "host": "h2", "node": node, "pid": 42, "step": 130, "epoch": 2, "phase": "backward"},
        "stalled_s": 61.0,
        "limit_s": 60.0,
        "reached_step": reached,
        "line": "snakeddp.train: run base hung: rank 1 ...",
    }


def one(outcome: str, *, seconds: float, resumed: int | None, kept: int | None, kept_at: float | None,
        the_hang: dict | None = None) -> dict:  # fmt: skip
    saved = {"step": kept, "epoch": 1, "saved_at": T0 + kept_at} if kept is not None else None
    return tries.entry(
        started=T0,
        ended=T0 + seconds,
        outcome=outcome,
        exit_code=0 if outcome == "completed" else 1,
        launcher="direct",
        job_id=None,
        resumed_from={"step": resumed, "epoch": 0, "saved_at": T0 - 5} if resumed is not None else None,
        saved_now=saved,
        hang=the_hang,
    )


def test_tries_are_numbered_in_order_and_read_back_as_written(tmp_path):
    first = tries.append(tmp_path, one("hung", seconds=100, resumed=None, kept=100, kept_at=40, the_hang=hang()))
    second = tries.append(tmp_path, one("completed", seconds=50, resumed=100, kept=300, kept_at=49))
    assert (first["number"], second["number"]) == (1, 2)
    assert tries.read(tmp_path) == [first, second]
    assert first["reached_step"] == 140 and first["kept_at_s"] == 40 and second["resumed_from_step"] == 100


def test_a_save_from_before_the_try_is_not_what_the_try_kept():
    before = {"step": 50, "epoch": 0, "saved_at": T0 - 1}
    entry = tries.entry(started=T0, ended=T0 + 9, outcome="failed", exit_code=1, launcher="srun", job_id="7",
                        resumed_from=before, saved_now=before, hang=None)  # fmt: skip
    assert (entry["resumed_from_step"], entry["kept_step"], entry["kept_at_s"]) == (50, None, None)


def test_goodput_counts_what_each_ending_lost_against_the_whole():
    history = [
        one("hung", seconds=100, resumed=None, kept=100, kept_at=40, the_hang=hang(reached=140)),
        one("preempted", seconds=30, resumed=100, kept=160, kept_at=30),
        one("failed", seconds=20, resumed=160, kept=None, kept_at=None),
        one("completed", seconds=60, resumed=160, kept=400, kept_at=59),
    ]
    got = tries.goodput(history)
    assert got["tries"] == 4 and got["seconds"] == 210
    # The hang lost its 60 s after the last save (40 steps trained again), the preemption nothing (it saved on
    # the way out), the failure its 20 s (it saved nothing; how far it got is unknown).
    assert got["lost"] == {
        "hung": {"tries": 1, "seconds": 60.0, "steps": 40},
        "preempted": {"tries": 1, "seconds": 0.0, "steps": 0},
        "failed": {"tries": 1, "seconds": 20.0, "steps": None},
    }
    assert got["useful_s"] == 130 and got["ratio"] == round(130 / 210, 4)
    assert tries.goodput([]) is None


def test_a_hung_try_names_the_node_a_slurm_retry_leaves_out(tmp_path):
    tries.append(tmp_path, one("hung", seconds=9, resumed=None, kept=None, kept_at=None, the_hang=hang(node="n2")))
    tries.append(tmp_path, one("hung", seconds=9, resumed=None, kept=None, kept_at=None, the_hang=hang(node=None)))
    tries.append(tmp_path, one("failed", seconds=9, resumed=None, kept=None, kept_at=None))
    never = {**hang(), "kind": "never_joined", "culprit": None, "missing": [3], "missing_nodes": ["n4"]}
    tries.append(tmp_path, one("hung", seconds=9, resumed=None, kept=None, kept_at=None, the_hang=never))
    assert tries.hang_nodes(tries.read(tmp_path)) == ["n2", "n4"]


def test_a_hang_that_follows_the_run_to_another_node_is_the_runs_own_and_names_no_node_to_leave_out(tmp_path):
    """Rank 1 stops with the ranks at step 140 on n2, then again on n3: the run's own place, not a node's. At
    another step, or on the same node again (by its scheduler's name, else its host), a hang stays the node's."""
    for node, reached in (("n2", 140), ("n3", 140), ("n5", 200), ("n5", 200), (None, 140)):
        tried = one("hung", seconds=9, resumed=None, kept=None, kept_at=None, the_hang=hang(node, reached))
        tries.append(tmp_path, tried)
    on_h7 = {**hang(None, 140), "culprit": {**hang()["culprit"], "node": None, "host": "h7"}}
    tries.append(tmp_path, one("hung", seconds=9, resumed=None, kept=None, kept_at=None, the_hang=on_h7))
    held = tries.read(tmp_path)
    assert tries.own_hangs(held[:4]) == {1: [2], 2: [1]}
    assert tries.hang_nodes(held[:4]) == ["n5"]
    # Without a scheduler's node, try 5 is where its host is, h2: perhaps n2's or n3's (one host, many nodes).
    assert tries.own_hangs(held[:5]) == {1: [2, 5], 2: [1, 5]}
    assert tries.own_hangs(held) == {1: [2, 5, 6], 2: [1, 5, 6], 5: [1, 2, 6], 6: [1, 2, 5]}
    assert tries.place(hang()) == ("stopped", 1, 140)
    assert tries.place({**hang(), "kind": "slow"}) is None


def test_the_first_rank_to_find_the_try_hung_is_the_one_recorded_and_the_launcher_takes_it_once(tmp_path):
    assert tries.write_hang(tmp_path, hang(node="first"))
    assert not tries.write_hang(tmp_path, hang(node="second"))
    assert [p.name for p in tmp_path.iterdir()] == ["hung.json"], "no partial file left"
    assert tries.take_hang(tmp_path)["culprit"]["node"] == "first"
    assert tries.take_hang(tmp_path) is None


def test_a_hang_record_snakeddp_did_not_write_is_ignored_and_the_try_recorded_as_failed(tmp_path, capsys):
    RunPaths(tmp_path).hung.write_text(json.dumps({"kind": "stopped", "culprit": "rank 1"}))
    assert tries.take_hang(tmp_path) is None
    assert "is not a hang record snakeddp wrote" in capsys.readouterr().out
    assert not RunPaths(tmp_path).hung.exists()


def test_last_json_says_what_last_ckpt_holds(tmp_path):
    RunPaths(tmp_path).checkpoints.mkdir()
    tries.write_saved(tmp_path, 120, 3)
    saved = tries.saved(tmp_path)
    assert (saved["step"], saved["epoch"]) == (120, 3)
    RunPaths(tmp_path).last_saved.write_text('{"step": "120"}')
    assert tries.saved(tmp_path) is None


def test_the_newest_checkpoint_is_the_one_last_json_names_else_last_ckpt(tmp_path):
    """A disk that filled between an epoch's top-k checkpoint and its last.ckpt left last.json naming the top-k one:
    the next try resumes it. A name that is not a checkpoint beside it, or one that is gone, is last.ckpt's."""
    paths = RunPaths(tmp_path)
    paths.checkpoints.mkdir()
    assert tries.newest_checkpoint(tmp_path) is None
    top_k = paths.checkpoints / "epoch002-val_loss0.5003.ckpt"
    top_k.write_bytes(b"epoch 2")
    tries.write_saved(tmp_path, 20, 1, top_k.name)
    assert tries.newest_checkpoint(tmp_path) == top_k, "a top-k checkpoint, though last.ckpt is not there"
    paths.last_checkpoint.write_bytes(b"epoch 1")
    assert tries.newest_checkpoint(tmp_path) == top_k
    for named in ("../run-state.json", f".{top_k.name}.123.partial", "last.json", "epoch003-val_loss0.4.ckpt"):
        tries.write_saved(tmp_path, 20, 1, named)
        assert tries.newest_checkpoint(tmp_path) == paths.last_checkpoint, named
    paths.last_saved.write_text(json.dumps({"step": 10, "epoch": 0, "saved_at": T0}))  # written before names
    assert tries.saved(tmp_path)["checkpoint"] == "last.ckpt"
    assert tries.newest_checkpoint(tmp_path) == paths.last_checkpoint


@pytest.mark.parametrize("text", ["{not json", '{"format": "snakeddp-tries/1", "tries": [{"number": 0}]}'])
def test_a_tries_file_snakeddp_did_not_write_stops_in_one_line_and_its_hint_sets_it_aside(tmp_path, text):
    path = RunPaths(tmp_path).tries
    path.write_text(text)
    with pytest.raises(RunStateError, match="is not a record of tries snakeddp wrote") as raised:
        tries.read(tmp_path)
    message = str(raised.value)
    assert "\n" not in message and "HINT: move it aside" in message
    command = message.split("(mv ", 1)[1].split(")", 1)[0]
    subprocess.run(["mv", *shlex.split(command)], check=True)
    assert tries.read(tmp_path) == []


def test_a_killed_try_reached_the_step_rank_0_last_posted():
    """A kill -9 leaves no hang record: how far it got is rank 0's last post (every 2 s), not its last save, so
    goodput counts the steps it trained after that save as lost."""
    resumed = {"step": 160, "epoch": 3, "saved_at": T0 - 5}
    killed = tries.entry(started=T0, ended=T0 + 20, outcome="failed", exit_code=137, launcher="direct", job_id=None,
                         resumed_from=resumed, saved_now=resumed, hang=None, posted_step=171)  # fmt: skip
    assert (killed["kept_step"], killed["reached_step"]) == (None, 171)
    assert tries.goodput([killed])["lost"]["failed"]["steps"] == 11
    done = {"step": 400, "epoch": 7, "saved_at": T0 + 59}
    completed = tries.entry(started=T0, ended=T0 + 60, outcome="completed", exit_code=0, launcher="direct",
                            job_id=None, resumed_from=resumed, saved_now=done, hang=None, posted_step=398)  # fmt: skip
    assert completed["reached_step"] == 400, "a completed try reached what it saved"
