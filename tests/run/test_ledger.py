"""The ledger of nodes (snakeddp.run.ledger): events kept with their dates, whole under concurrent writers, a
damaged file refused in one line that the HINT's move fixes, a hung try's nodes recorded by the launcher, a hang
that follows the run from node to node counted against none of them, and `snakeddp nodes` as typed, listing and
clearing."""

from __future__ import annotations

import argparse
import contextlib
import io
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
from snakeddp.run.layout import RunPaths
from tests.helpers import TINY, make_run, subprocess_env

DAY = 86400.0


def culprit(node: str | None, host: str = "h1") -> dict:
    return {"rank": 1, "host": host, "node": node, "pid": 9, "step": 5, "epoch": 0, "phase": "backward"}


def hang(kind: str = "stopped", node: str | None = "n2", reached: int = 6, **more) -> dict:
    who = None if kind == "stuck_together" else culprit(node)
    record = {"kind": kind, "culprit": who, "stalled_s": 61.0, "limit_s": 60.0, "reached_step": reached, "line": "l"}
    return {**record, **more}


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
    assert tries.blamed(hang(node="n2")) == ["n2"]
    assert tries.blamed(hang(node=None)) == ["h1"]
    assert tries.blamed(hang("never_joined", node="n1", missing_nodes=["n3"])) == ["n1", "n3"]
    assert tries.blamed(hang("stuck_together")) == []


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


def hung_try(args: argparse.Namespace, the_hang: dict, stacks: bool = True) -> str:
    """One try of the run that hangs as ``the_hang`` says, recorded by snakeddp.launch as its ranks are gone, with
    the evidence the rank that found it hung keeps (stacks.txt: training.gather); what the launcher said."""
    number = len(tries.read(args.run_dir)) + 1
    if stacks:
        kept = RunPaths(args.run_dir).stacks_of(number)
        kept.parent.mkdir(parents=True)
        kept.write_text("Python stacks of run base's 2 ranks\n")
    tries.write_hang(args.run_dir, the_hang)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        launch.record_try(args, "srun", time.time() - 70, 69, [], None)
    return out.getvalue()


def counted_against(results: Path) -> dict[str, int]:
    return {node: len(events) for node, events in ledger.to_leave_out(results, 1, 14).items()}


def test_a_hang_at_the_same_step_on_another_node_is_the_runs_own_and_counted_against_neither_node(tmp_path):
    """Rank 1's training_step deadlocks at step 120 wherever it runs: try 1 hangs on c1 (a node's hang, as far
    as anyone knows yet), the retry on c2 hangs there again. Neither node is counted against, nor left out of the
    run's next submission; an old ledger's events of other runs stay as they were."""
    args = launcher_args(tmp_path)
    results = tmp_path / "results"
    ledger.path(results).write_text(json.dumps({"format": "snakeddp-nodes/1", "nodes": {
        "c1": [{"kind": "hang", "run": "other", "at": ledger.utc(time.time() - DAY), "note": "stopped: rank 0"}],
    }}))  # fmt: skip  # as a ledger written before cause existed
    first = hung_try(args, hang(node="c1", reached=120))
    assert first.startswith("snakeddp: node c1's hang recorded in") and "(2 events in 14 days)" in first
    assert counted_against(results) == {"c1": 2}
    assert tries.hang_nodes(tries.read(args.run_dir)) == ["c1"]  # Slurm's retry goes without c1

    said = hung_try(args, hang(node="c2", reached=120))
    assert said.count("\n") == 1, said
    kept = [RunPaths(args.run_dir).stacks_of(n) for n in (2, 1)]
    assert said.strip() == (
        f"snakeddp: rank 1 hung at step 120 again, now on node c2 (try 1: node c1): the run's own code or data, not a "
        f"node's, so {ledger.path(results)} counts it against neither node. HINT: rank 1's stack in {kept[0]} (and "
        f"{kept[1]}) shows where the run stops; fix that in the model or the data and rerun: a retry stops there "
        "again on any node"
    )
    assert counted_against(results) == {"c1": 1}, "the other run's hang on c1 stays c1's"
    written = json.loads(ledger.path(results).read_text())
    jsonschema.validate(written, ledger.schema())
    assert [(e["run"], e.get("cause")) for e in written["nodes"]["c1"]] == [("other", None), ("base", "run")]
    (on_c2,) = written["nodes"]["c2"]
    ended = [t["ended_at"] for t in tries.read(args.run_dir)]
    assert on_c2 == {"kind": "hang", "run": "base", "at": ended[1], "note": "stopped: rank 1 at step 5, backward",
                     "cause": "run"}  # fmt: skip
    assert written["nodes"]["c1"][1]["at"] == ended[0]
    assert tries.hang_nodes(tries.read(args.run_dir)) == [], "nor left out of the run's own retry"

    third = hung_try(args, hang(node="c3", reached=120), stacks=False)  # no evidence kept: its record named instead
    assert third.startswith("snakeddp: rank 1 hung at step 120 again, now on node c3 (try 1: node c1; try 2: node ")
    assert "counts it against none of these 3 nodes. HINT: rank 1's stack in " in third
    assert counted_against(results) == {"c1": 1}


def test_a_hang_at_another_step_or_again_on_the_same_node_stays_the_nodes(tmp_path):
    """A node that hangs at a random step is no run's fault: a retry that hangs elsewhere in the run, or at the same
    place on the same node, is counted against the node as before; so are slow spells, whose step is where their
    window closed, and a rank that never came (where it was placed, not the run's code)."""
    args = launcher_args(tmp_path)
    results = tmp_path / "results"
    hung_try(args, hang(node="c1", reached=120))
    elsewhere = hung_try(args, hang(node="c2", reached=300))
    assert elsewhere.startswith("snakeddp: node c2's hang recorded in")
    again = hung_try(args, hang(node="c2", reached=300))
    assert again.startswith("snakeddp: node c2's hang recorded in") and "(2 events in 14 days)" in again
    for node in ("s1", "s2"):
        hung_try(args, hang("slow", node=node, reached=500, relative=0.5))
    for node in ("m1", "m2"):
        never = {**hang("never_joined"), "culprit": None, "reached_step": None, "missing": [1], "missing_nodes": [node]}
        hung_try(args, never)  # as snakeddp.training.meeting writes it
    expected = {"c1": 1, "c2": 2, "s1": 1, "s2": 1, "m1": 1, "m2": 1}
    assert counted_against(results) == expected
    assert all("cause" not in e for events in ledger.read(results).values() for e in events)


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
    for at in (now - DAY, now - 1):  # a run's own hang, here and on n3: counted against neither (it says so)
        ledger.record(results, "n3", "hang", "deadlocks", at, cause="run")
    listed = snakeddp("nodes", "--results", str(results), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, first, second, third = (line.split() for line in listed.stdout.splitlines())
    assert " ".join(header) == (
        "node hangs slow spells failures runs' own hangs last 14 days last event sbatch --exclude"
    )
    assert first[0] == "n1" and first[1:6] == ["0", "1", "0", "0", "0"] and first[-1] == "no"
    assert second[0] == "n2" and second[1:6] == ["2", "0", "0", "0", "2"] and second[-1] == "yes"
    assert third[0] == "n3" and third[1:6] == ["0", "0", "0", "2", "0"] and third[-1] == "no"
    assert " ".join(third[6:-1]) == f"hang {ledger.utc(now - 1)[:10]} (deadlocks, the run's own)"
    wider = snakeddp("nodes", "--results", str(results), "--days", "60", "--events", "1", cwd=tmp_path)
    assert [line.split()[-1] for line in wider.stdout.splitlines()[1:]] == ["yes", "yes", "no"]
    cleared = snakeddp("nodes", "--results", str(results), "--clear", "n2", cwd=tmp_path)
    assert cleared.returncode == 0 and cleared.stdout.startswith("n2: forgot 2 event(s) (hang ")
    assert list(ledger.read(results)) == ["n1", "n3"]
    unknown = snakeddp("nodes", "--results", str(results), "--clear", "n9", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1
    assert (
        "holds no events of node n9 (nodes it holds: n1, n3). HINT: run `snakeddp nodes` to list them" in unknown.stderr
    )
