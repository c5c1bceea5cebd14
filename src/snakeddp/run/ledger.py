"""The checkout's ledger of nodes, ``results/nodes.json``: each node's hangs, slow spells and failures with
their dates (schemas/nodes.schema.json), so a node that misbehaved is remembered after the run.

Written where an event is known: ``snakeddp.launch`` records a hung try's nodes when the try ends
(``record_try``: the node of the rank the others waited for, of a rank that could not reach the rendezvous,
and where ranks that never came were placed); anything else that knows a node misbehaved calls ``record``
(a slow spell: the ranks' watch). Read by the slurm profile, which leaves a node with
``site.exclude_after_events`` events in ``site.exclude_within_days`` days out of later train jobs
(snakeddp.slurm.exclude), and by ``snakeddp nodes``, which lists it and clears a node.

A hang that is the run's own is no node's: when a try hangs at the same place in the run (the same kind, rank
and step) as an earlier try of its attempt did on another node (run.tries.own_hangs: a deadlock in the model's
or the data's code follows the run from node to node), its event and the earlier tries' are kept with
``cause: run``, which no count of a node's events takes.

A node is named as its scheduler names it (Slurm's SLURMD_NODENAME, what ``sbatch --exclude`` takes), else
by its host name: several Slurm nodes may share one host. Every change reads, changes and replaces the file
(atomically) under an ``flock`` on ``.nodes.json.lock`` beside it, so two runs ending at once both keep
their event. A file that breaks the schema is refused in one line with a HINT and never rewritten. The
ledger stays in the checkout: the report's crate and the remote platforms' uploads name the files they
take, and it is none of them.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from snakeddp.errors import RunStateError
from snakeddp.run import tries
from snakeddp.run.layout import RunPaths
from snakeddp.util import schemas
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.schemas import read_checked

FILE = "nodes.json"
LOCK = ".nodes.json.lock"
SCHEMA_FILE = "nodes.schema.json"
FORMAT = "snakeddp-nodes/1"
KINDS = ("hang", "slow", "failure")
RUNS_OWN = "run"  # an event's cause where it was the run's own hang, not the node's
# The schema's defaults of site.exclude_after_events and site.exclude_within_days (NVIDIA's FACT
# attribution avoids a node seen twice in 14 days); `snakeddp nodes` counts over the same window.
EXCLUDE_AFTER_EVENTS = 2
EXCLUDE_WITHIN_DAYS = 14.0
DAY_S = 86400.0


class LedgerError(RunStateError):
    """results/nodes.json is not a ledger snakeddp wrote, or names no such node; the message says what to do."""


def schema() -> dict[str, Any]:
    return schemas.packaged(SCHEMA_FILE)


def path(results: Path) -> Path:
    return Path(results) / FILE


# An event's time as tries.json writes a try's (to the second): a try's events are found again by it.
utc = tries.utc


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def read(results: Path) -> dict[str, list[dict[str, Any]]]:
    """Every node's events, oldest first; {} where nothing was recorded yet."""
    target = path(results)
    if not target.is_file():
        return {}
    record, problem = read_checked(target, schema())
    if problem is None:
        return {node: list(events) for node, events in record["nodes"].items()}
    raise LedgerError(
        f"{target} is not a ledger of nodes snakeddp wrote ({problem}). HINT: move it aside (mv {target} "
        f"{target}.bad) and run again: a new ledger starts empty, so the nodes it named are scheduled again."
    )


@contextmanager
def _changing(results: Path) -> Iterator[dict[str, list[dict[str, Any]]]]:
    """The ledger to change in place, written back when the block ends; one writer at a time."""
    Path(results).mkdir(parents=True, exist_ok=True)
    descriptor = os.open(Path(results) / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # let go by the kernel however the holder ends
        nodes = read(results)
        yield nodes
        atomic_write_json(path(results), {"format": FORMAT, "nodes": {n: e for n, e in sorted(nodes.items()) if e}})
    finally:
        os.close(descriptor)


def record(
    results_dir: Path,
    host: str,
    kind: str,
    run: str,
    when: float | None = None,
    note: str | None = None,
    cause: str | None = None,
) -> dict[str, Any]:
    """Add one event to the ledger of ``results_dir`` (the workflow's results/): ``host`` the node (the
    scheduler's name for it where there is one: snakeddp.platforms.scheduler_node, else the host name),
    ``kind`` one of KINDS, ``run`` the run id, ``when`` seconds since the epoch (default: now), ``cause``
    RUNS_OWN for the run's own hang (counted against no node). The event."""
    if kind not in KINDS or not host or not run or cause not in (None, RUNS_OWN):
        raise LedgerError(f"snakeddp.run.ledger: an event {kind!r} of node {host!r} in run {run!r}; this is a bug")
    event = {"kind": kind, "run": run, "at": utc(time.time() if when is None else when)}
    if note:
        event["note"] = note
    if cause:
        event["cause"] = cause
    with _changing(results_dir) as nodes:
        _add(nodes, host, event)
    return event


def _add(nodes: dict[str, list[dict[str, Any]]], host: str, event: dict[str, Any]) -> None:
    """``event`` among ``host``'s, which stay in time order."""
    nodes.setdefault(host, []).append(event)
    nodes[host].sort(key=lambda e: seconds(e["at"]))


def record_try(run_dir: Path, entry: Mapping[str, Any]) -> list[str]:
    """The ledger's events of one try of the run in ``run_dir`` (results/runs/<run>; its tries.json entry),
    said in one line each; the nodes it counts them against. A hang that is the run's own (tries.own_hangs)
    is counted against none, nor are the earlier tries' that hung at its place. A ledger that cannot be read
    is said, and the try stays recorded in tries.json."""
    hang = entry.get("hang")
    if entry.get("outcome") != "hung" or not hang:
        return []
    results, run = Path(run_dir).parent.parent, Path(run_dir).name
    culprit = hang.get("culprit") or {}
    note = f"{hang['kind']}: rank {culprit.get('rank')} at step {culprit.get('step')}, {culprit.get('phase')}"
    nodes = tries.blamed(hang)
    # A try ended for a slow rank (launch.straggler: stop) ends as a hang does; its node was slow, not stuck.
    kind, said = ("slow", "slow spell") if hang["kind"] == "slow" else ("hang", "hang")
    try:
        attempt = tries.read(run_dir)
    except RunStateError:  # the launcher has just written it; should it not read, the hang is the node's as before
        attempt = []
    at_its_place = tries.own_hangs(attempt).get(entry.get("number"), [])
    earlier = [t for t in attempt if t["number"] in at_its_place]
    try:
        if earlier and nodes:
            _record_own(run_dir, entry, earlier, note)
            return []
        for node in nodes:
            record(results, node, kind, run, seconds(entry["ended_at"]), note)
            within = len(to_leave_out(results, 1, EXCLUDE_WITHIN_DAYS).get(node, []))
            days = f"{EXCLUDE_WITHIN_DAYS:g} days"
            events = f"{within} event{'' if within == 1 else 's'} in {days}"
            print(f"snakeddp: node {node}'s {said} recorded in {path(results)} ({events})", flush=True)
    except LedgerError as error:
        print(f"snakeddp: the {said} of node {', '.join(nodes)} is not recorded: {error}", flush=True)
    return nodes


def _record_own(run_dir: Path, entry: Mapping[str, Any], earlier: list[Mapping[str, Any]], note: str) -> None:
    """A hang the run's own: its event kept against no node, the earlier tries' that hung at its place taken
    back from theirs (cause: run), in one change; said in one line, with where to see the ranks' stacks."""
    results, run = Path(run_dir).parent.parent, Path(run_dir).name
    hang, nodes = entry["hang"], tries.blamed(entry["hang"])
    before = [(t["ended_at"], tries.blamed(t["hang"])) for t in earlier]
    with _changing(results) as held:
        for node in nodes:
            _add(held, node, {"kind": "hang", "run": run, "at": entry["ended_at"], "note": note, "cause": RUNS_OWN})
        for at, named in before:
            for node in named:
                for event in held.get(node, []):
                    if event["kind"] == "hang" and event["run"] == run and event["at"] == at:
                        event["cause"] = RUNS_OWN
    rank, step = hang["culprit"]["rank"], hang["reached_step"]
    every = {*nodes, *(node for _, named in before for node in named)}
    against = "neither node" if len(every) == 2 else f"none of these {len(every)} nodes"
    tried = "; ".join(f"try {t['number']}: node {', '.join(tries.blamed(t['hang']))}" for t in earlier)
    told = f"rank {rank} hung at step {step} again, now on node {', '.join(nodes)} ({tried})"
    print(
        f"snakeddp: {told}: the run's own code or data, not a node's, so {path(results)} counts it against "
        f"{against}. HINT: {where_to_look(run_dir, rank, [entry, *earlier])}",
        flush=True,
    )


def where_to_look(run_dir: Path, rank: int, hung: list[Mapping[str, Any]]) -> str:
    """What to do about a hang that is the run's own: see where it stops in the ranks' stacks (the tries' hang
    evidence, snakeddp.training.gather), else in the tries' records, and fix it there."""
    paths = RunPaths(run_dir)
    stacks = [str(paths.stacks_of(t["number"])) for t in hung if paths.stacks_of(t["number"]).is_file()]
    if stacks:
        shown = f"rank {rank}'s stack in {stacks[0]}" + (f" (and {', '.join(stacks[1:])})" if stacks[1:] else "")
    else:
        shown = f"the tries' hang records in {paths.tries} (each one's line names its ranks' stacks, where kept)"
    return (
        f"{shown} shows where the run stops; fix that in the model or the data and rerun: a retry stops there "
        "again on any node"
    )


def counted(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events a node is held to: not the runs' own hangs."""
    return [event for event in events if event.get("cause") != RUNS_OWN]


def recent(events: list[dict[str, Any]], days: float, now: float) -> list[dict[str, Any]]:
    """The node's events within ``days`` that count against it."""
    return [event for event in counted(events) if now - seconds(event["at"]) <= days * DAY_S]


def to_leave_out(results: Path, events: int, days: float, now: float | None = None) -> dict[str, list[dict[str, Any]]]:
    """The nodes with at least ``events`` events in the last ``days`` days, with those events."""
    now = time.time() if now is None else now
    within = {node: recent(happened, days, now) for node, happened in read(results).items()}
    return {node: happened for node, happened in within.items() if len(happened) >= events}


def clear(results: Path, node: str) -> list[dict[str, Any]]:
    """Forget ``node``'s events; the events forgotten."""
    with _changing(results) as nodes:
        if node not in nodes:
            known = ", ".join(sorted(nodes)) or "none"
            raise LedgerError(
                f"{path(results)} holds no events of node {node} (nodes it holds: {known}). HINT: run "
                "`snakeddp nodes` to list them, and clear one by the name it shows."
            )
        return nodes.pop(node)


def summary(event: Mapping[str, Any]) -> str:
    """``hang 2026-11-28 (base)``: an event in a few words; ``(base, the run's own)`` for one counted against no
    node."""
    own = ", the run's own" if event.get("cause") == RUNS_OWN else ""
    return f"{event['kind']} {event['at'][:10]} ({event['run']}{own})"


def rows(results: Path, events: int, days: float, now: float | None = None) -> tuple[list[str], list[list[str]]]:
    """The ledger as a table: per node its counts by kind (the runs' own hangs apart: counted against no node),
    those in the window, its last event, and whether a profile that places jobs on nodes (Slurm's) leaves it
    out at these settings."""
    now = time.time() if now is None else now
    header = ["node", *(f"{kind}s" if kind != "slow" else "slow spells" for kind in KINDS), "runs' own hangs"]
    header += [f"last {days:g} days", "last event", "sbatch --exclude"]  # what a profile placing jobs on nodes does
    table = []
    for node, happened in sorted(read(results).items()):
        counts = [str(sum(e["kind"] == kind for e in counted(happened))) for kind in KINDS]
        own = str(len(happened) - len(counted(happened)))
        within = len(recent(happened, days, now))
        table.append([node, *counts, own, str(within), summary(happened[-1]), "yes" if within >= events else "no"])
    return header, table
