"""The ledger of nodes (snakeddp.run.ledger): events kept with their dates, whole under concurrent writers, a
damaged file refused in one line that the HINT's move fixes, a hung try's nodes recorded by the launcher, and
`snakeddp nodes` as typed, listing and clearing."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from snakeddp import launch
from snakeddp.run import ledger, tries
from tests.helpers import TINY, make_run, subprocess_env

DAY = 86400.0


def culprit(node: str | None, host: str = "h1") -> dict:
    return {"rank": 1, "host": host, "node": node, "pid": 9, "step": 5, "epoch": 0, "phase": "backward"}


def hang(kind: str = "stopped", node: str | None = "n2", **more) -> dict:
    who = None if kind == "stuck_together" else culprit(node)
    return {"kind": kind, "culprit": who, "stalled_s": 61.0, "limit_s": 60.0, "reached_step": 6, "line": "l", **more}


def test_events_are_kept_per_node_oldest_first_and_the_file_is_the_schemas(tmp_path):
    now = time.time()
    ledger.record(tmp_path, "n2", "hang", "base", now, note="stopped: rank 1")
    ledger.record(tmp_path, "n2", "slow", "other", now - 3 * DAY)
    ledger.record(tmp_path, "n1", "failure", "base", now - DAY)
    written = json.loads(ledger.path(tmp_path).read_text())
    jsonschema.validate(written, ledger.schema())
    assert [e["kind"] for e in written["nodes"]["n2"]] == ["slow", "hang"]
    hung = {"kind": "hang", "run": "base", "at": ledger.utc(now), "note": "stopped: rank 1"}
    assert written["nodes"]["n2"][1] == hung
    assert sorted(ledger.read(tmp_path)) == ["n1", "n2"]


def test_a_node_with_enough_events_in_the_window_is_left_out_and_older_ones_do_not_count(tmp_path):
    now = time.time()
    ledger.record(tmp_path, "old", "hang", "base", now - 20 * DAY)
    ledger.record(tmp_path, "old", "hang", "base", now - DAY)
    ledger.record(tmp_path, "bad", "hang", "a", now - 13 * DAY)
    ledger.record(tmp_path, "bad", "slow", "b", now)
    ledger.record(tmp_path, "once", "hang", "a", now)
    assert sorted(ledger.to_leave_out(tmp_path, 2, 14, now)) == ["bad"]
    assert sorted(ledger.to_leave_out(tmp_path, 2, 30, now)) == ["bad", "old"]
    assert sorted(ledger.to_leave_out(tmp_path, 1, 14, now)) == ["bad", "old", "once"]
    assert ledger.to_leave_out(tmp_path / "none", 2, 14, now) == {}


def many(results: str, writer: int, count: int) -> None:
    for index in range(count):
        ledger.record(Path(results), f"n{index % 3}", "slow", f"run-{writer}-{index}")


def test_writers_at_the_same_time_lose_no_event(tmp_path):
    """Eight processes (two runs ending at once, many times over) each record 25 events."""
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=many, args=(str(tmp_path), w, 25)) for w in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    runs = {e["run"] for events in ledger.read(tmp_path).values() for e in events}
    assert len(runs) == 8 * 25


def test_a_damaged_ledger_is_one_line_with_a_hint_never_rewritten_and_moving_it_aside_starts_anew(tmp_path):
    target = ledger.path(tmp_path)
    target.write_text('{"format": "snakeddp-nodes/1", "nodes": {"n2": [{"kind": "hung"}]}}')
    before = target.read_text()
    with pytest.raises(ledger.LedgerError) as raised:
        ledger.record(tmp_path, "n1", "hang", "base")
    message = str(raised.value)
    assert "\n" not in message and f"{target} is not a ledger of nodes snakeddp wrote (nodes.n2.0: " in message
    assert f"HINT: move it aside (mv {target} {target}.bad)" in message
    assert target.read_text() == before, "never rewritten"
    subprocess.run(["mv", str(target), f"{target}.bad"], check=True)  # what the HINT says
    ledger.record(tmp_path, "n1", "hang", "base")
    assert list(ledger.read(tmp_path)) == ["n1"]


def test_a_hung_trys_nodes_are_the_culprits_scheduler_node_else_its_host_and_where_absent_ranks_were(tmp_path):
    assert ledger.hung_nodes(hang(node="n2")) == ["n2"]
    assert ledger.hung_nodes(hang(node=None)) == ["h1"]
    assert ledger.hung_nodes(hang("never_joined", node="n1", missing_nodes=["n3"])) == ["n1", "n3"]
    assert ledger.hung_nodes(hang("stuck_together")) == []


def launcher_args(root: Path) -> argparse.Namespace:
    """What snakeddp.launch parsed for a local run under ``root/results`` as the workflow writes it."""
    run_yaml, manifest = make_run(root, TINY)
    return argparse.Namespace(run_dir=run_yaml.parent, platform="local", config=run_yaml, data=manifest)


def test_the_launcher_records_a_hung_try_in_the_checkout_ledger_and_nothing_for_other_tries(tmp_path, capsys):
    """snakeddp.launch's record_try, as it runs when a try's ranks are gone: hung.json folded into tries.json, and
    its node into results/nodes.json beside the runs."""
    args = launcher_args(tmp_path)
    run_dir = args.run_dir
    tries.write_hang(run_dir, hang(node=None))
    launch.record_try(args, "direct", time.time() - 70, 69, [], None)
    assert "snakeddp: node h1's hang recorded in" in capsys.readouterr().out
    launch.record_try(args, "direct", time.time() - 5, 0, [], None)  # completed: no event
    (event,) = ledger.read(tmp_path / "results")["h1"]
    assert event["kind"] == "hang" and event["run"] == "base" and event["note"] == "stopped: rank 1 at step 5, backward"
    assert event["at"] == tries.read(run_dir)[0]["ended_at"]


def test_a_try_stopped_for_a_slow_rank_is_its_nodes_slow_spell_not_a_hang(tmp_path, capsys):
    """launch.straggler: stop ends the try as a hang does (hung.json of kind slow): its node was slow, not stuck."""
    args = launcher_args(tmp_path)
    tries.write_hang(args.run_dir, hang("slow", node="n4", relative=0.52))
    launch.record_try(args, "direct", time.time() - 70, 69, [], None)
    assert "snakeddp: node n4's slow spell recorded in" in capsys.readouterr().out
    (event,) = ledger.read(tmp_path / "results")["n4"]
    assert event["kind"] == "slow" and event["run"] == "base"


def test_a_damaged_ledger_is_said_by_the_launcher_and_the_try_stays_recorded(tmp_path, capsys):
    args = launcher_args(tmp_path)
    run_dir = args.run_dir
    ledger.path(tmp_path / "results").write_text("[]")
    tries.write_hang(run_dir, hang())
    launch.record_try(args, "direct", time.time() - 9, 69, [], None)
    said = capsys.readouterr().out
    assert "snakeddp: the hang of node n2 is not recorded: " in said and "HINT: move it aside" in said
    assert [t["outcome"] for t in tries.read(run_dir)] == ["hung"]


def snakeddp(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The installed ``snakeddp`` command, as a user types it."""
    command = [str(Path(sys.executable).parent / "snakeddp"), *args]
    return subprocess.run(command, cwd=cwd, env=subprocess_env(), capture_output=True, text=True, check=False)


def test_snakeddp_nodes_lists_the_ledger_and_clears_a_node_as_typed(tmp_path):
    results = tmp_path / "results"
    empty = snakeddp("nodes", "--results", str(results), cwd=tmp_path)
    assert empty.returncode == 0 and "no events of any node in" in empty.stdout
    now = time.time()
    for at in (now - 2 * DAY, now):
        ledger.record(results, "n2", "hang", "base", at)
    ledger.record(results, "n1", "slow", "base", now - 30 * DAY)
    listed = snakeddp("nodes", "--results", str(results), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, first, second = (line.split() for line in listed.stdout.splitlines())
    assert " ".join(header) == "node hangs slow spells failures last 14 days last event sbatch --exclude"
    assert first[0] == "n1" and first[1:5] == ["0", "1", "0", "0"] and first[-1] == "no"
    assert second[0] == "n2" and second[1:5] == ["2", "0", "0", "2"] and second[-1] == "yes"
    wider = snakeddp("nodes", "--results", str(results), "--days", "60", "--events", "1", cwd=tmp_path)
    assert [line.split()[-1] for line in wider.stdout.splitlines()[1:]] == ["yes", "yes"]
    cleared = snakeddp("nodes", "--results", str(results), "--clear", "n2", cwd=tmp_path)
    assert cleared.returncode == 0 and cleared.stdout.startswith("n2: forgot 2 event(s) (hang ")
    assert list(ledger.read(results)) == ["n1"]
    unknown = snakeddp("nodes", "--results", str(results), "--clear", "n9", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1
    assert "holds no events of node n9 (nodes it holds: n1). HINT: run `snakeddp nodes` to list them" in unknown.stderr
