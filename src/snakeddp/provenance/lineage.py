"""Finished attempts found by what they computed, wherever they are kept under results/runs.

A run directory with no attempt of its own for an attempt key takes one over instead of training
from epoch 1, in this order:

1. a finished attempt of the same run at a shorter or longer budget (``Identity.key_at``) that
   stopped early at an epoch within this budget: a run of this budget stops there too, so it is
   restored as this budget's result;
2. a finished attempt with this very key kept by another run directory (a renamed run, a key moved
   between ``sweep:`` and the fixed config): restored as a copy;
3. the finished attempt of the largest shorter budget that ran its whole budget: its checkpoints and
   metrics.csv are copied and training continues from its last.ckpt.

The run's own directory is searched first, then the others, by name. Every record is checked
against the provenance schema; one that does not match is passed over (it cannot be trusted), and
only folders inside results/runs are followed. The source is copied, never moved: it stays whole,
so coming back to its budget, or the other run, restores it as before.

A finished attempt is only restored, or taken over, with every checkpoint its record lists: one whose
checkpoints ``snakeddp prune`` removed (or that are missing, or not the bytes recorded) is passed over for
the next, and the run's own such attempt is set aside whole under ``attempts/<id>-pruned/`` (``-damaged``),
a name no restore takes back, so its record stays listed while the run trains that attempt again. The log
says so in one line.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snakeddp.errors import RunStateError
from snakeddp.provenance.schema import problems
from snakeddp.run import attempt, status
from snakeddp.run.attempt import Identity, attempt_id
from snakeddp.run.layout import ATTEMPT_FILES, RUNS, STORED_AS, AttemptPaths, RunPaths
from snakeddp.run.runfile import RunFile
from snakeddp.run.runs import Gone, gone_checkpoint, read_metrics
from snakeddp.util import rerun
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.hashing import sha256_json
from snakeddp.util.paths import inside
from snakeddp.util.terminal import say

CONTINUE, STOPPED_EARLY, SAME_KEY = "continue", "stopped_early", "same_key"
# A search rung's record taken from the first epochs of a finished attempt of a longer budget.
LONGER_BUDGET = "longer_budget"


@dataclass(frozen=True)
class Origin:
    """A finished attempt that a run's attempt takes over, and how (CONTINUE, STOPPED_EARLY, SAME_KEY)."""

    source: AttemptPaths
    record: dict[str, Any]
    how: str

    @property
    def attempt_id(self) -> str:
        return self.record["attempt"]["id"] if self.record.get("attempt") else self.record["origin_sha256"][:12]

    @property
    def run_id(self) -> str:
        return self.source.run_dir.name

    @property
    def epochs(self) -> list[dict[str, Any]]:
        """training.epochs_from of its record; one attempt's epochs in records made before it existed."""
        training = self.record["training"]
        return training.get("epochs_from") or [
            {"attempt": self.attempt_id, "first_epoch": 1, "last_epoch": training["epochs_completed"]}
        ]

    def continuing(self, run_id: str, budget: int) -> str:
        """The line the log shows when training goes on from this attempt's last epoch."""
        done = self.record["training"]["epochs_completed"]
        where = "" if self.run_id == run_id else f" of run {self.run_id}"
        return f"continuing attempt {self.attempt_id}{where} (epochs 1-{done}) from epoch {done + 1}/{budget}"


def _records(runs: Path, run_dir: Path, identity: Identity) -> Iterator[tuple[AttemptPaths, dict[str, Any]]]:
    """Every finished attempt that may belong to ``identity``'s lineage, with a record that matches the
    schema: ``run_dir``'s first, then those of the other runs when ``run_dir`` is in a results/runs
    folder. Only the records whose key could be this run's are validated (5 ms each here): a launch
    reads every run's records, and a sweep of a thousand runs would otherwise spend seconds per launch."""
    lineage = _Lineage(identity)
    if not runs.is_dir():
        return  # nothing trained yet
    others = sorted(path for path in runs.iterdir() if path.is_dir() and path.name != run_dir.name)
    for directory in [run_dir, *(others if runs.name == RUNS else [])]:
        if inside(runs, directory.name) is None:
            continue  # a link that leads out of results/runs
        for source, path in attempt.finished_attempts(directory):
            if inside(runs, path.relative_to(runs).as_posix()) is None:
                continue
            try:
                record = read_json(path)
            except (OSError, ValueError):
                continue
            if lineage.may_hold(record) and not problems(record):
                yield source, record


class _Lineage:
    """The attempt keys ``identity`` has at any budget, computed once per budget a record names."""

    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.keys: dict[int, str | None] = {}

    def may_hold(self, record: Any) -> bool:
        """Whether an unvalidated record's key is this run's at its own budget (read defensively)."""
        if not isinstance(record, dict):
            return False
        origin, training = record.get("origin_sha256"), record.get("training")
        if origin == self.identity.key:
            return True
        epochs = training.get("max_epochs") if isinstance(training, dict) else None
        if self.identity.budget is None or type(epochs) is not int:
            return False
        if epochs not in self.keys:
            self.keys[epochs] = self.identity.key_at(epochs)
        return self.keys[epochs] == origin


def find(run_dir: Path, identity: Identity) -> Origin | None:
    """The finished attempt that ``run_dir``'s attempt of ``identity`` takes over (see the module), or None."""
    return _choose(run_dir, identity)[0]


def _choose(run_dir: Path, identity: Identity) -> tuple[Origin | None, tuple[Origin, Gone] | None]:
    """``find``'s attempt, and the one it would have taken but for its checkpoints (pruned or missing), if any."""
    skipped = None
    for origin in _ranked(run_dir, identity):
        gone = gone_checkpoint(origin.source, origin.record)
        if gone is None:
            return origin, skipped
        skipped = skipped or (origin, gone)
    return None, skipped


def _ranked(run_dir: Path, identity: Identity) -> list[Origin]:
    """Every finished attempt ``run_dir``'s attempt of ``identity`` may take over, the one to take first."""
    key, budget = identity.key, identity.budget
    found: dict[str, list[tuple[int, Origin]]] = {CONTINUE: [], STOPPED_EARLY: [], SAME_KEY: []}
    for source, record in _records(run_dir.parent, run_dir, identity):
        training, own = record["training"], source.run_dir.name == run_dir.name
        if record["origin_sha256"] == key:
            if not own:
                found[SAME_KEY].append((0, Origin(source, record, SAME_KEY)))
            continue
        theirs = training["max_epochs"]
        if budget is None or identity.key_at(theirs) != record["origin_sha256"]:
            continue
        done = training["epochs_completed"]
        if record["status"] in ("early_stopped", "diverged") and done <= budget:
            found[STOPPED_EARLY].append((0 if own else 1, Origin(source, record, STOPPED_EARLY)))
        elif record["status"] == "completed" and done == theirs < budget:
            found[CONTINUE].append((-theirs if own else budget - theirs, Origin(source, record, CONTINUE)))
    return [
        origin
        for how in (STOPPED_EARLY, SAME_KEY, CONTINUE)
        for _, origin in sorted(found[how], key=lambda ranked: ranked[0])
    ]


def longer(run_dir: Path, identity: Identity) -> Origin | None:
    """A finished attempt of the same run at a longer budget that trained past this budget (the run's
    own first, then the shortest): its first ``identity.budget`` epochs are this budget's, as training
    is deterministic and nothing in the run depends on the budget (``Identity.key_at``). A search rung
    takes its score from them (``truncated``) instead of training them again."""
    budget = identity.budget
    found: list[tuple[tuple[int, int], Origin]] = []
    for source, record in _records(run_dir.parent, run_dir, identity):
        training = record["training"]
        theirs = training["max_epochs"]
        if budget is None or theirs <= budget or identity.key_at(theirs) != record["origin_sha256"]:
            continue
        if training["epochs_completed"] > budget:  # one that stopped within this budget is find()'s
            rank = (0 if source.run_dir.name == run_dir.name else 1, theirs)
            found.append((rank, Origin(source, record, LONGER_BUDGET)))
    return min(found, key=lambda ranked: ranked[0])[1] if found else None


def truncated(origin: Origin, identity: Identity, run: RunFile) -> dict[str, Any]:
    """The record of a search rung scored on the first ``identity.budget`` epochs of ``origin`` (a
    ``longer`` attempt): the verdict of those epochs' rows of its metrics.csv, and no checkpoint (none
    was kept at this budget's last epoch)."""
    from snakeddp.provenance.record import ranking

    budget = identity.budget
    rows = read_metrics(origin.source.metrics)[:budget]
    if [row.get("epoch") for row in rows] != list(range(budget)):
        raise RunStateError(
            f"{origin.source.metrics} does not hold epochs 1-{budget} of attempt {origin.attempt_id}, whose record "
            f"says it trained {origin.record['training']['epochs_completed']}. HINT: move that attempt's folder "
            f"aside ({origin.source.folder}) and rerun: this rung then trains its epochs."
        )
    record = _adopted(origin, identity, run)
    training = record["training"]
    verdict = ranking(rows, training.get("monitor") or {"metric": "val_loss", "mode": "min"})
    training.update({key: value for key, value in verdict.items() if key != "monitor" or "monitor" in training})
    training.update(
        epochs_completed=budget,
        stopped_early=False,
        resumed_from=None,
        best_checkpoint=None,
        last_checkpoint=None,
        checkpoints=[],
        epochs_from=[
            {**span, "last_epoch": min(span["last_epoch"], budget)}
            for span in origin.epochs
            if span["first_epoch"] <= budget
        ],
        # These epochs are this budget's exactly only if that training was deterministic (None: its
        # record predates the field); on GPUs without trainer.deterministic they are close, not equal.
        scored_from_longer={
            "attempt": origin.attempt_id,
            "max_epochs": origin.record["training"]["max_epochs"],
            "deterministic": origin.record["training"].get("deterministic"),
        },
    )
    record["status"] = "completed"
    return record


@dataclass(frozen=True)
class Start:
    """How an attempt starts: the checkpoint it resumes (None: from epoch 1, or nothing to train when
    ``attempt.finished``), and the finished attempt it took over, if any."""

    resume: Path | None
    origin: Origin | None


def prepare(run_dir: Path, identity: Identity, run: RunFile) -> Start:
    """``attempt.prepare``, then for a key with no attempt of its own here, the attempt it takes over
    (``find``), copied in: a finished one to restore, or one to continue training from. This key's own finished
    attempt without the checkpoints its record lists (pruned, missing, changed) is not restored: it is set aside
    (``set_aside``) and the run trains it again, as if it had none."""
    resume = attempt.prepare(run_dir, identity.key, run.dataset_id)
    aside = None
    if attempt.finished(run_dir):
        unrestorable = _unrestorable(run_dir)
        if unrestorable is None:
            return Start(resume, None)
        record, gone = unrestorable
        aside = (set_aside(run_dir, identity.key, gone), record, gone)
    elif resume is not None:
        return Start(resume, None)
    origin, skipped = _choose(run_dir, identity)
    if origin is not None and (damaged := gone_checkpoint(origin.source, origin.record, hashed=True)) is not None:
        say(
            f"{run_dir.name}: attempt {origin.attempt_id} of run {origin.run_id} is not taken over: {damaged.why}, "
            f"so the run trains from its first epoch. That attempt is kept as it is ({origin.source.folder})."
        )
        origin = None
    elif origin is not None:
        if origin.how == CONTINUE:
            seeded = attempt.seed(run_dir, origin.source, identity.key, epochs_from=origin.epochs)
        else:
            seeded = attempt.seed(run_dir, origin.source, identity.key, record=_adopted(origin, identity, run))
        origin = origin if seeded else None
    if aside is not None:
        kept, record, gone = aside
        label = f"{run.run_id}@{kept.folder.name}"
        say(
            f"{run.run_id}: attempt {attempt_id(identity.key)} finished with this config "
            f"({record['training']['epochs_completed']} epochs), but {gone.why}: not restored; its record stays, as "
            f"{label}, and {_instead(origin, run.run_id)}"
        )
    elif skipped is not None:
        passed, gone = skipped
        where = "" if passed.run_id == run.run_id else f" of run {passed.run_id}"
        what = "continued" if passed.how == CONTINUE else "restored"
        done = passed.record["training"]["epochs_completed"]
        say(
            f"{run.run_id}: attempt {passed.attempt_id}{where} ({done} epochs) is not {what}: {gone.why}; "
            f"{_instead(origin, run.run_id)}"
        )
    if origin is None:
        return Start(None, None)
    last = RunPaths(run_dir).last_checkpoint
    return Start(last if origin.how == CONTINUE and last.is_file() else None, origin)


def _instead(origin: Origin | None, run_id: str) -> str:
    """What the run does instead of restoring an attempt it cannot."""
    if origin is None:
        return "the run trains from epoch 1"
    where = "" if origin.run_id == run_id else f" of run {origin.run_id}"
    if origin.how == CONTINUE:
        done = origin.record["training"]["epochs_completed"]
        return f"the run continues attempt {origin.attempt_id}{where} from epoch {done + 1} instead"
    return f"the run takes over attempt {origin.attempt_id}{where} instead"


def _unrestorable(run_dir: Path) -> tuple[dict[str, Any], Gone] | None:
    """The run directory's finished attempt and why it cannot be restored (its checkpoints, hashed); None when it
    can, or when its record is not one to read (``restore`` says so, in its own line)."""
    try:
        record = read_json(RunPaths(run_dir).finished)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or problems(record):
        return None
    gone = gone_checkpoint(RunPaths(run_dir), record, hashed=True)
    return None if gone is None else (record, gone)


def set_aside(run_dir: Path, key: str, gone: Gone) -> AttemptPaths:
    """Move the run directory's attempt of ``key`` (files and record) to ``attempts/<id>-pruned/`` (``-damaged``
    where no pruned.json says `snakeddp prune` removed them): never ``attempts/<id>``, which ``attempt.prepare``
    would take back and restore. The run directory then holds this key's attempt with nothing of its own."""
    paths = RunPaths(run_dir)
    name = f"{attempt_id(key)}-{'pruned' if gone.pruned is not None else 'damaged'}"
    target = paths.unused_attempt(name)
    target.folder.mkdir(parents=True)
    for entry in ATTEMPT_FILES:
        if (run_dir / entry).exists():
            (run_dir / entry).rename(target.folder / STORED_AS.get(entry, entry))
    paths.provenance.unlink(missing_ok=True)  # the published copy of the record that moved
    atomic_write_json(paths.state, {"resume_key": key})
    return target


def _adopted(origin: Origin, identity: Identity, run: RunFile) -> dict[str, Any]:
    """The record of a finished attempt taken over as this run's attempt of ``identity``: this run's
    id, sweep point, config and key, its epochs and where it came from."""
    record = copy.deepcopy(origin.record)
    record.update(
        run_id=run.run_id,
        sweep_point=run.point,
        config=copy.deepcopy(run.config),
        config_sha256=sha256_json(run.config),
        origin_sha256=identity.key,
    )
    record["training"].update(max_epochs=identity.budget, epochs_from=origin.epochs)
    record["attempt"] = {
        "id": attempt_id(identity.key),
        "restored": True,
        "restored_from": {"run": origin.run_id, "attempt": origin.attempt_id, "why": origin.how},
    }
    return record


def restore(run_dir: Path, key: str) -> str:
    """Publish the finished attempt's record (finished.json, checked against the provenance schema) as
    provenance.json again, saying it was restored, not trained; returns the line the log shows."""
    paths = RunPaths(run_dir)
    try:
        record = read_json(paths.finished)
        found = problems(record)
    except (OSError, ValueError) as exc:
        found = [f"not JSON: {exc}"]
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise RunStateError(
            f"{paths.finished}, the record of finished attempt {attempt_id(key)}, does not match the provenance "
            f"schema: {found[0][:160]}{more}. HINT: move it aside (mv {paths.finished} {paths.finished}.bad) and "
            f"rerun its train job ({rerun.forcing(paths.provenance)}): the attempt resumes from its newest checkpoint, "
            "trains nothing and writes its record again."
        )
    gone = gone_checkpoint(paths, record)
    if gone is not None:  # prepare sets such an attempt aside; this is one that started otherwise
        raise RunStateError(
            f"attempt {attempt_id(key)} finished, but {gone.why}, so it is not restored without its model. HINT: "
            f"rerun its train job ({rerun.forcing(paths.provenance)}): the attempt is then kept under "
            f"{paths.attempts.name}/ with its record, and the run trains again."
        )
    came_from = (record.get("attempt") or {}).get("restored_from")
    record["attempt"] = {
        "id": attempt_id(key),
        "restored": True,
        "restored_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **({"restored_from": came_from} if came_from else {}),
    }
    atomic_write_json(paths.provenance, record)
    epochs = record["training"]["epochs_completed"]
    # `snakeddp status` said what the last try left, of another attempt (failed, or done at another budget).
    status.write(
        run_dir, "done", fresh=True, writer="launcher", epoch=epochs, max_epochs=record["training"]["max_epochs"],
        percent=100.0, eta_s=0.0, detail=f"restored attempt {attempt_id(key)}, nothing trained",
    )  # fmt: skip
    if came_from and came_from["why"] == STOPPED_EARLY:
        return (
            f"attempt {came_from['attempt']} stopped early at epoch {epochs}, within max_epochs "
            f"{record['training']['max_epochs']}, so this budget stops there too: restored it as attempt "
            f"{attempt_id(key)}, nothing trained"
        )
    where = f" in run {came_from['run']}" if came_from else ""
    return (
        f"attempt {attempt_id(key)} already finished with this config, data and environment{where} "
        f"({epochs} epochs): restored {'a copy' if came_from else 'it'}, nothing trained"
    )
