"""A run's tries: every start of its current attempt's ranks, how it ended, and what the ones that did
not complete cost (``tries.json``, schemas/run-tries.schema.json).

One writer each: ``snakeddp.launch`` appends a try when its ranks are gone; rank 0 writes beside the
checkpoints the newest one saved whole, the step it holds and when (``last.json``, after every save: the
top-k and last.ckpt at an epoch's end, a preemption's last.ckpt); the rank
that finds a try hung writes ``hung.json`` first-come (snakeddp.training.watch), which the launcher
folds into the try. Nothing is written per step. The attempt's tries move with it into attempts/<id>/
(run.layout's ATTEMPT_FILES); provenance.json repeats them, with their ``goodput``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from snakeddp.errors import RunStateError
from snakeddp.run.account import total as accounts_total
from snakeddp.run.layout import CHECKPOINT_GLOB, LAST_CHECKPOINT, AttemptPaths, RunPaths
from snakeddp.util import schemas
from snakeddp.util.fsutil import atomic_write_json, read_json

SCHEMA_FILE = "run-tries.schema.json"
FORMAT = "snakeddp-tries/1"
OUTCOMES = ("completed", "preempted", "hung", "failed", "interrupted")
LOSSES = OUTCOMES[1:]
# Hangs found while the ranks met, before any step.
BEFORE_THE_FIRST_STEP = ("never_joined", "unreachable")


def schema() -> dict[str, Any]:
    return schemas.packaged(SCHEMA_FILE)


def _problem(instance: Any, definition: str | None = None) -> str | None:
    """The first way ``instance`` breaks the schema (or one of its $defs), or None."""
    whole = schema()
    target = {"$ref": f"#/$defs/{definition}", "$defs": whole["$defs"]} if definition else whole
    return schemas.problem(instance, target)


def utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def read(folder: Path) -> list[dict[str, Any]]:
    """The tries of the attempt in ``folder`` (a run directory, or an attempt kept under attempts/)."""
    path = AttemptPaths(folder).tries
    if not path.is_file():
        return []
    try:
        record = read_json(path)
    except (OSError, ValueError) as error:
        problem: str | None = f"not JSON: {error}"
    else:
        problem = _problem(record)
        if problem is None:
            return list(record["tries"])
    raise RunStateError(
        f"{path} is not a record of tries snakeddp wrote ({problem}). HINT: move it aside (mv {path} {path}.bad) "
        "and rerun: the attempt's checkpoints stay, only the history of its earlier tries is set aside."
    )


def append(run_dir: Path, entry: Mapping[str, Any]) -> dict[str, Any]:
    """Add one try (numbered after the ones before it) to the run directory's tries.json; the entry."""
    tries = read(run_dir)
    entry = {**entry, "number": len(tries) + 1}
    problem = _problem(entry, "try")
    if problem is not None:
        raise RunStateError(f"snakeddp.run.tries: a try that breaks {SCHEMA_FILE} ({problem}); this is a bug")
    atomic_write_json(RunPaths(run_dir).tries, {"format": FORMAT, "tries": [*tries, entry]})
    return entry


def write_saved(run_dir: Path, step: int, epoch: int, checkpoint: str = LAST_CHECKPOINT) -> None:
    """Beside the checkpoint just saved whole in checkpoints/ (a top-k one or last.ckpt): its name, the step it
    holds and when (rank 0; at an epoch's end and at a preemption's stop, not per step)."""
    record = {"step": step, "epoch": epoch, "saved_at": time.time(), "checkpoint": checkpoint}
    atomic_write_json(RunPaths(run_dir).last_saved, record)


def saved(run_dir: Path) -> dict[str, Any] | None:
    """last.json, when it is one snakeddp wrote (one written before it named its checkpoint names last.ckpt)."""
    try:
        record = read_json(AttemptPaths(run_dir).last_saved)
    except (OSError, ValueError):
        return None
    fields = {"step": int, "epoch": int, "saved_at": (int, float), "checkpoint": str}
    if not isinstance(record, dict):
        return None
    record = {"checkpoint": LAST_CHECKPOINT, **record}
    return record if all(isinstance(record.get(k), t) for k, t in fields.items()) else None


def newest_checkpoint(folder: Path) -> Path | None:
    """The newest checkpoint the attempt in ``folder`` (a run directory, or an attempt kept under attempts/) saved
    whole, which its next try resumes: the one last.json names, else last.ckpt; None where neither is there.

    At an epoch's end Lightning saves the top-k checkpoint, then last.ckpt, of the same step. A disk that filled
    between the two left last.ckpt an epoch behind, and last.json naming the top-k one (it is rewritten after
    every whole save): resuming last.ckpt would train that epoch twice. A save whose last.json did not follow
    leaves it naming the save before, never a later one than the files hold."""
    paths = AttemptPaths(folder)
    record = saved(folder)
    name = record["checkpoint"] if record else LAST_CHECKPOINT
    named = paths.checkpoints / name
    if Path(name).name == name and not name.startswith(".") and named.match(CHECKPOINT_GLOB) and named.is_file():
        return named
    return paths.last_checkpoint if paths.last_checkpoint.is_file() else None


def write_hang(run_dir: Path, record: Mapping[str, Any]) -> bool:
    """hung.json, unless another rank wrote it first (the first to find the run hung is the one that
    says so); whole or not at all. True when this record is the one kept."""
    target = RunPaths(run_dir).hung
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    atomic_write_json(partial, dict(record))
    try:
        os.link(partial, target)  # fails when it exists: the first record stays
    except FileExistsError:
        return False
    finally:
        partial.unlink(missing_ok=True)
    return True


def take_hang(run_dir: Path) -> dict[str, Any] | None:
    """hung.json, removed once read: the launcher folds it into the try. A record that breaks the schema
    is ignored (said once): the try is then recorded as failed, and nothing else is lost."""
    path = RunPaths(run_dir).hung
    if not path.is_file():
        return None
    try:
        record = read_json(path)
    except (OSError, ValueError):
        record = None
    path.unlink(missing_ok=True)
    problem = "not JSON" if record is None else _problem(record, "hang")
    if problem is not None:
        print(f"snakeddp: {path} is not a hang record snakeddp wrote ({problem}); ignored", flush=True)
        return None
    return record


def entry(
    *,
    started: float,
    ended: float,
    outcome: str,
    exit_code: int,
    launcher: str,
    job_id: str | None,
    resumed_from: Mapping[str, Any] | None,
    saved_now: Mapping[str, Any] | None,
    hang: Mapping[str, Any] | None,
    placement: Mapping[str, Any] | None = None,
    account: Mapping[str, Any] | None = None,
    posted_step: int | None = None,
) -> dict[str, Any]:
    """One try, from what the launcher saw (times, exit) and the run directory holds (``resumed_from``: last.json
    when it started, ``saved_now`` when it ended, ``hang``: hung.json; ``account``: run.account.of_try;
    ``posted_step``: the step of rank 0's last post in status.json, every 2 s: how far a killed try got)."""
    fresh = saved_now if saved_now is not None and saved_now["saved_at"] >= started else None
    kept = fresh["step"] if fresh else None
    reached = hang["reached_step"] if hang else None
    if hang and hang["kind"] in BEFORE_THE_FIRST_STEP:  # it trained nothing
        reached = resumed_from["step"] if resumed_from else 0
    if outcome in ("completed", "preempted") and kept is not None:
        reached = kept
    elif (
        isinstance(posted_step, int)
        and posted_step > (reached or 0)
        and not (hang and hang["kind"] in BEFORE_THE_FIRST_STEP)
    ):
        reached = posted_step
    return {
        "started_at": utc(started),
        "ended_at": utc(ended),
        "seconds": round(max(ended - started, 0.0), 3),
        "outcome": outcome,
        "exit_code": exit_code,
        "launcher": launcher,
        "job_id": job_id,
        "resumed_from_step": resumed_from["step"] if resumed_from else None,
        "kept_step": kept,
        "kept_at_s": round(fresh["saved_at"] - started, 3) if fresh else None,
        "reached_step": max(reached, kept) if reached is not None and kept is not None else (reached or kept),
        "hang": dict(hang) if hang else None,
        **({"placement": dict(placement)} if placement else {}),
        **({"account": dict(account)} if account else {}),
    }


def goodput(tries: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What the tries cost: all their wall time, the useful part (what the kept checkpoints hold), and per
    kind of ending what was lost. A try that did not complete lost what it did after its last save; its
    steps are the ones the next try trained again."""
    if not tries:
        return None
    total = sum(t["seconds"] for t in tries)
    lost: dict[str, dict[str, Any]] = {}
    for index, t in enumerate(tries):
        if t["outcome"] == "completed":
            continue
        kept_s = t["kept_at_s"] or 0.0
        resumed = tries[index + 1]["resumed_from_step"] if index + 1 < len(tries) else t["kept_step"]
        # Where the next try picked up; for the last, what this one kept, else where it began itself.
        fallback = t["kept_step"] if t["kept_step"] is not None else t["resumed_from_step"]
        start = resumed if resumed is not None else (fallback or 0)
        steps = max(t["reached_step"] - start, 0) if t["reached_step"] is not None else None
        loss = lost.setdefault(t["outcome"], {"tries": 0, "seconds": 0.0, "steps": 0})
        loss["tries"] += 1
        loss["seconds"] = round(loss["seconds"] + max(t["seconds"] - kept_s, 0.0), 3)
        loss["steps"] = None if steps is None or loss["steps"] is None else loss["steps"] + steps
    wasted = sum(loss["seconds"] for loss in lost.values())
    return {
        "tries": len(tries),
        "seconds": round(total, 3),
        "useful_s": round(max(total - wasted, 0.0), 3),
        "ratio": round(max(total - wasted, 0.0) / total, 4) if total > 0 else None,
        "lost": lost,
        **({"account": summed} if (summed := accounts_total(tries)) else {}),
    }


# Hangs found while the ranks trained, at a step: the run's place is known (hang.reached_step).
AT_A_STEP = ("stopped", "stuck_together")


def place(hang: Mapping[str, Any]) -> tuple[str, int, int] | None:
    """Where in the run a hang happened: its kind, the rank the others waited for, and the step the ranks
    reached (where the others wait, exact while they answer; the culprit's own step is its last report, every
    2 s, which may lag where it stopped). None before the first step (the meeting: where ranks were placed and
    how they reach each other, not the run's code) and for a slow spell (where its window closed)."""
    culprit = hang.get("culprit")
    if hang.get("kind") not in AT_A_STEP or not culprit or hang.get("reached_step") is None:
        return None
    return hang["kind"], culprit["rank"], hang["reached_step"]


def blamed(hang: Mapping[str, Any]) -> list[str]:
    """The nodes a hung try's record blames: the culprit's (its scheduler node, else its host) and where ranks
    that never came were placed. Every rank stuck in the same collective, with no culprit, blames none."""
    culprit = hang.get("culprit") or {}
    named = [culprit.get("node") or culprit.get("host"), *hang.get("missing_nodes", [])]
    return sorted({node for node in named if node})


def elsewhere(hang: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether two hangs' culprits ran on different nodes: their scheduler's names where both have one, else
    their hosts (a node's name and a host's may name one machine)."""
    one, two = hang.get("culprit") or {}, other.get("culprit") or {}
    if one.get("node") and two.get("node"):
        return one["node"] != two["node"]
    return bool(one.get("host") and two.get("host")) and one["host"] != two["host"]


def own_hangs(tries: Iterable[Mapping[str, Any]]) -> dict[int, list[int]]:
    """The attempt's hung tries that are the run's own, not a node's: each hung at the same place in the run
    (``place``) as another of them did on another node, as a deadlock in the model's or the data's code does
    whatever node it runs on; the same place on the same node stays that node's. By try number, the other tries
    that hung at its place, in order."""
    where: dict[tuple[str, int, int], list[tuple[int, Mapping[str, Any]]]] = {}
    for index, t in enumerate(tries, 1):
        at = place(t.get("hang") or {}) if t["outcome"] == "hung" else None
        if at is not None:
            where.setdefault(at, []).append((t.get("number", index), t["hang"]))
    own = {}
    for hung in where.values():
        for number, hang in hung:
            others = [(n, h) for n, h in hung if n != number]
            if any(elsewhere(hang, h) for _, h in others):
                own[number] = [n for n, _ in others]
    return own


def hang_nodes(tries: Iterable[Mapping[str, Any]]) -> list[str]:
    """The scheduler's nodes the attempt's hung tries named: where the rank the others waited for ran, and
    where the ranks that never came were placed; not where the run hung at its own place (``own_hangs``)."""
    tries = list(tries)
    own = own_hangs(tries)
    nodes = []
    for index, t in enumerate(tries, 1):
        hang = t.get("hang") or {}
        if t["outcome"] == "hung" and t.get("number", index) not in own:
            nodes += [(hang.get("culprit") or {}).get("node"), *hang.get("missing_nodes", [])]
    return sorted({node for node in nodes if node})
