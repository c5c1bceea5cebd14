"""Finished runs as the report and the command line see them: provenance plus per-epoch metrics.

A run is addressed by its id (``results/runs/<id>``) or by a path to its directory or its
provenance.json; an earlier finished attempt of a run (kept under ``results/runs/<id>/attempts/``)
by ``<id>@<attempt id>``, any unique prefix of the attempt id. Paths inside provenance (the data
manifest) are relative to the directory the workflow ran in, which for the standard layout is
three levels above the run directory.
"""

from __future__ import annotations

import csv
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snakeddp.errors import ExportError, ProvenanceError, RunNotFound
from snakeddp.run import rungs
from snakeddp.run.layout import (
    ATTEMPTS,
    CHECKPOINTS,
    PROVENANCE,
    PRUNED,
    RUN_ID_PATTERN,
    RUNS,
    AttemptPaths,
    RunPaths,
    paths_of,
    run_records,
)
from snakeddp.util import rerun
from snakeddp.util.fsutil import read_json
from snakeddp.util.hashing import sha256_file, sha256_file_once
from snakeddp.util.paths import inside

# metrics.csv, one row per epoch: what the training loop counted and measured, around the metrics
# the model logged (whatever their names; the built-in models log train_loss, val_loss and val_acc),
# which sit between LEADING and TRAILING. samples and batches are counted as the DataModule yielded
# them, all ranks together (a DistributedSampler's padding included); val_ the same for one validation.
LEADING = ("epoch", "partition", "samples", "batches", "val_samples", "val_batches")
TRAILING = ("lr", "train_seconds", "epoch_seconds", "samples_per_s", "data_wait_s", "world_size", "finished_at")
BOOKKEEPING = LEADING + TRAILING
# What runs recorded before trainer.monitor existed ranked by.
DEFAULT_MONITOR = {"metric": "val_loss", "mode": "min"}


def metric_order(name: str) -> tuple[bool, bool, str]:
    """Training metrics first, then validation's, losses first within each (train_loss, val_loss, val_acc)."""
    return (not name.startswith("train"), not name.endswith("loss"), name)


def logged_metrics(rows: list[dict[str, Any]]) -> list[str]:
    """The model's metrics in metrics.csv rows: columns the training loop did not write that hold a
    value in some epoch (files written before metrics.csv took any name have empty val_acc columns)."""
    names = {name for row in rows for name, value in row.items() if name not in BOOKKEEPING and value not in (None, "")}
    return sorted(names, key=metric_order)


def _number(text: str) -> int | float | str | None:
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """metrics.csv as one dict per epoch, numbers parsed, empty cells None."""
    path = Path(path)
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return [{key: _number(value) for key, value in row.items()} for row in csv.DictReader(handle)]


@dataclass(frozen=True)
class Run:
    """One finished run: its directory, its provenance record and its per-epoch metrics."""

    run_dir: Path
    provenance: dict[str, Any]
    metrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.provenance["run_id"]

    @property
    def attempt_id(self) -> str:
        """The attempt's short id (records from before attempts were named carry only the key)."""
        return (self.provenance.get("attempt") or {}).get("id") or self.provenance["origin_sha256"][:12]

    @property
    def paths(self) -> AttemptPaths:
        """Its files: a run directory's, or those of an earlier attempt kept under attempts/."""
        return paths_of(self.run_dir)

    @property
    def is_current(self) -> bool:
        """Whether this is the run's current attempt (not one kept under attempts/)."""
        return not self.paths.is_kept

    @property
    def label(self) -> str:
        """How people name it: the run id, with ``@<attempt id>`` for an earlier attempt; ``@<its folder>`` where
        that is the attempt id and more (``<id>-pruned``: one set aside beside the same attempt trained again)."""
        if self.is_current:
            return self.run_id
        folder = self.run_dir.name
        return f"{self.run_id}@{folder if folder.startswith(self.attempt_id) else self.attempt_id}"

    @property
    def pruned(self) -> dict[str, Any] | None:
        """What `snakeddp prune` removed of this attempt's checkpoints (its pruned.json), or None."""
        return pruned_record(self.paths)

    @property
    def rerun_target(self) -> str:
        """Its provenance.json as a Snakemake target, relative to the directory the workflow ran in."""
        path = self.paths.run_dir.resolve() / PROVENANCE
        try:
            return path.relative_to(self.workdir.resolve()).as_posix()
        except ValueError:
            return str(path)

    @property
    def workdir(self) -> Path:
        """The directory the workflow ran in (relative paths in provenance start there)."""
        # Absolute first: a run named from inside results/runs/ is the bare "lr-0.01" there, whose parent is "".
        home = self.paths.run_dir.absolute()
        if home.parent.name == RUNS and len(home.resolve().parents) >= 3:
            return home.resolve().parents[2]
        return Path.cwd()

    def typed_here(self, command: str) -> str:
        """``command``, whose paths start in the workflow's directory, as typed in this one: after a cd there when
        this is one of its subdirectories (a command run inside results/ hinted `rm results/data/...`, which is not
        there). From outside the checkout (``--results``) it stays as it is, relative to the checkout."""
        workdir, here = self.workdir.resolve(), Path.cwd().resolve()
        return f"cd {shlex.quote(str(workdir))} && {command}" if workdir in here.parents else command

    def resolve(self, recorded: str) -> Path:
        """A path as recorded in provenance (relative to the workflow's directory), made usable from
        here; one that leads out of that directory is refused."""
        workdir, name = self.workdir, recorded
        if isinstance(recorded, str) and Path(recorded).is_absolute():
            try:
                name = Path(recorded).resolve().relative_to(workdir.resolve()).as_posix()
            except ValueError:
                name = None
        found = [path for base in (workdir, Path.cwd()) if (path := inside(base, name)) is not None]
        if not found:
            raise self._escapes(recorded, f"the workflow's directory {workdir}")
        return next((path for path in found if path.exists()), found[0])

    @property
    def logged(self) -> list[str]:
        """The metrics the model logged (metrics.csv's columns beyond the training loop's own)."""
        return logged_metrics(self.metrics)

    @property
    def monitor(self) -> dict[str, str]:
        """The metric the run ranked epochs by, and its mode (val_loss/min before trainer.monitor existed)."""
        return self.provenance["training"].get("monitor") or dict(DEFAULT_MONITOR)

    @property
    def best_score(self) -> float | None:
        """The monitored metric at the run's best epoch."""
        training = self.provenance["training"]
        return training["best_score"] if "best_score" in training else training["best_val_loss"]

    @property
    def at_best(self) -> dict[str, float | None]:
        """Every metric the model logged, at the best epoch (older records: val_loss and val_acc)."""
        training = self.provenance["training"]
        if training.get("best_metrics") is not None:
            return training["best_metrics"]
        legacy = {"val_loss": training["best_val_loss"], "val_acc": training["best_val_acc"]}
        return {name: value for name, value in legacy.items() if value is not None}

    @property
    def manifest_path(self) -> Path:
        return self.resolve(self.provenance["data"]["manifest"])

    def file(self, record: Mapping[str, Any]) -> Path:
        """The file of a checkpoint record (paths are relative to the run directory, and stay in it)."""
        path = inside(self.run_dir, record.get("path"))
        if path is None:
            raise self._escapes(record.get("path"), f"its run directory {self.run_dir}")
        return path

    def _escapes(self, recorded: Any, where: str) -> ProvenanceError:
        return foreign_record(
            self.paths,
            f"names the file {recorded!r}, which is not inside {where}; snakeddp follows no path a record "
            "points out of its directory",
        )


def pruned_record(paths: AttemptPaths) -> dict[str, Any] | None:
    """An attempt's pruned.json (``run.prune``), when it is one snakeddp wrote."""
    try:
        record = read_json(paths.pruned)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("removed"), list):
        return None
    return record


def pruned_paths(record: Mapping[str, Any] | None) -> set[str]:
    """The files (relative to the attempt's folder) a pruned.json (``pruned_record``) says `snakeddp prune` removed."""
    removed = (record or {}).get("removed", [])
    return {entry["path"] for entry in removed if isinstance(entry, dict) and "path" in entry}


def pruned_when(record: Mapping[str, Any]) -> str:
    """``by `snakeddp prune` on <date>`` of a pruned.json."""
    return f"by `snakeddp prune` on {str(record.get('pruned_at', 'a day not recorded'))[:10]}"


def pruned_unrecorded(paths: AttemptPaths, record: Mapping[str, Any]) -> bool:
    """Whether an attempt's checkpoints are gone as `snakeddp prune` left them before it wrote pruned.json: an
    earlier attempt (kept under attempts/; prune never touched a run's current one) whose checkpoints/ is gone whole,
    every checkpoint its record lists having been in it, with no pruned.json. That prune left no trace of its own, so
    this is read from the shape alone; a folder removed by hand looks the same (no file lost by damage does)."""
    if not paths.is_kept or paths.pruned.exists() or paths.checkpoints.exists():
        return False
    listed = listed_checkpoints(record)
    return bool(listed) and all(Path(entry["path"]).parts[:1] == (CHECKPOINTS,) for entry in listed)


# What verify and export say of checkpoints pruned_unrecorded finds gone.
UNRECORDED_PRUNE = (
    f"{CHECKPOINTS}/ is gone whole, with no {PRUNED}: how `snakeddp prune` left the attempts it pruned before it "
    f"recorded them in {PRUNED} (a folder removed by hand looks the same)"
)


@dataclass(frozen=True)
class Gone:
    """Why a finished attempt's checkpoints cannot be restored or continued: the first one its record lists that is
    not there as recorded (its path as the record has it), and the pruned.json that says `snakeddp prune` removed it."""

    path: str
    missing: bool
    pruned: dict[str, Any] | None = None

    @property
    def why(self) -> str:
        if self.pruned is not None:
            return f"its checkpoints were pruned {pruned_when(self.pruned)}"
        if self.missing:
            return f"its {self.path} is missing"
        return f"its {self.path} differs from the sha256 its record holds (damaged, or changed by hand)"


def listed_checkpoints(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every checkpoint a record lists (best, last and the top-k), once each."""
    training = record.get("training") or {}
    entries = [training.get("best_checkpoint"), training.get("last_checkpoint"), *(training.get("checkpoints") or [])]
    return list({entry["path"]: entry for entry in entries if isinstance(entry, dict) and entry.get("path")}.values())


def gone_checkpoint(folder: AttemptPaths, record: dict[str, Any], hashed: bool = False) -> Gone | None:
    """The first checkpoint ``record`` lists that ``folder`` does not hold (pruned or missing), or with ``hashed``
    one whose bytes differ from its recorded sha256; None when every one is there as recorded."""
    files = [(entry, inside(folder.folder, entry["path"])) for entry in listed_checkpoints(record)]
    for entry, path in files:
        if path is not None and not path.is_file():
            pruned = pruned_record(folder)
            return Gone(entry["path"], missing=True, pruned=pruned if entry["path"] in pruned_paths(pruned) else None)
    for entry, path in files if hashed else []:
        if path is not None and sha256_file_once(path) != entry.get("sha256"):
            return Gone(entry["path"], missing=False)
    return None


def retrain_hint(run: Run) -> str:
    """How to have a run's (or an earlier attempt's) model again when its checkpoints are gone or changed."""
    if run.is_current:
        return (
            f"train it again with {run.typed_here(rerun.forcing(run.rerun_target))} (the attempt with those "
            f"checkpoints is kept, record and all, under {run.paths.run_dir.name}/{ATTEMPTS}/)"
        )
    try:
        now = read_json(RunPaths(run.paths.run_dir).provenance).get("origin_sha256")
    except (OSError, ValueError, AttributeError):
        now = None
    if now == run.provenance["origin_sha256"]:
        return f"run {run.run_id} is this attempt trained again: `snakeddp export {run.run_id}`"
    return (
        "export another run or attempt (`snakeddp runs --all` lists them), or train it again: put back the config it "
        f"trained (`snakeddp compare {run.run_id} {run.label}` shows what differs) and rerun snakemake; this "
        "attempt's record stays"
    )


def best_checkpoint(run: Run) -> tuple[Path, Mapping[str, Any]]:
    """The best checkpoint's file and its provenance record, checked to be the file the run recorded: what
    ``snakeddp export`` refuses before it imports torch and Lightning (a mistyped run answers at once)."""
    record = (run.provenance.get("training") or {}).get("best_checkpoint")
    if not record:
        raise ExportError(
            f"run {run.label} has no best checkpoint to export: it trained with trainer.save_top_k: 0, which keeps "
            "only last.ckpt. HINT: set trainer.save_top_k: 1 or more and rerun snakemake (the run trains again)."
        )
    path = run.file(record)
    pruned = run.pruned
    if not path.is_file() and record["path"] in pruned_paths(pruned):
        raise ExportError(
            f"run {run.label}: its checkpoints were pruned {pruned_when(pruned)} ({run.paths.pruned}); its record and "
            f"metrics stay. HINT: {retrain_hint(run)}."
        )
    if not path.is_file() and pruned_unrecorded(run.paths, run.provenance):
        raise ExportError(
            f"run {run.label}: its checkpoints were pruned, as far as can be told: {UNRECORDED_PRUNE}; its record and "
            f"metrics stay. HINT: {retrain_hint(run)}."
        )
    if not path.is_file() or sha256_file(path) != record.get("sha256"):
        what = "changed since the run recorded it" if path.is_file() else "gone"
        raise ExportError(
            f"run {run.label}: its best checkpoint {path} is {what} (`snakeddp verify {run.label}` checks every file "
            f"of it). HINT: {retrain_hint(run)}."
        )
    return path, record


def best_run(runs: list[Run]) -> Run | None:
    """The run with the best score, when every run that has one ranks by the same metric and mode
    (scores of different metrics do not compare: then none is best)."""
    scored = [run for run in runs if run.best_score is not None]
    if not scored or len({(run.monitor["metric"], run.monitor["mode"]) for run in scored}) > 1:
        return None
    pick = min if scored[0].monitor["mode"] == "min" else max
    return pick(scored, key=lambda run: run.best_score)


def foreign_record(paths: AttemptPaths, what: str) -> ProvenanceError:
    """A record snakeddp did not write: one line saying what is wrong with it, and the way back."""
    return ProvenanceError(
        f"{paths.provenance}: {what}. HINT: this is not a record snakeddp wrote: move {paths.run_dir} out of "
        "results/ and rerun snakemake, which trains the run again."
    )


def load_run(run_dir: str | Path) -> Run:
    """A finished run as recorded; a record whose run id is not a run name is refused: the id names
    directories and files wherever the record is used (the report, the crate)."""
    paths = paths_of(run_dir)
    record = read_json(paths.provenance)
    recorded = record.get("run_id") if isinstance(record, dict) else None
    if not isinstance(recorded, str) or not re.fullmatch(RUN_ID_PATTERN, recorded):
        raise foreign_record(
            paths,
            f"records run id {recorded!r}, which is not a run name ({RUN_ID_PATTERN}); snakeddp uses no such record",
        )
    return Run(run_dir=paths.folder, provenance=record, metrics=read_metrics(paths.metrics))


def default_results(start: str | Path | None = None) -> Path:
    """The results directory for a command started anywhere in a checkout: the nearest ``results/`` at
    or above ``start`` (the working directory), else the one beside the nearest Snakefile."""
    here = Path(start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / "results").is_dir() or (directory / "Snakefile").is_file():
            return directory / "results"
    return Path("results")


def find_runs(results: str | Path, passed_over: list[ProvenanceError] | None = None) -> list[Run]:
    """Every finished run (one with provenance.json) under ``results/runs``, sorted by id. A record snakeddp did
    not write stops it (the report must not be made from it), unless ``passed_over`` is given: then that run is
    left out and its error kept there, so one crafted record does not hide every other run from a listing."""
    found = []
    for path in run_records(results):
        try:
            found.append(load_run(path.parent))
        except ProvenanceError as error:
            if passed_over is None:
                raise
            passed_over.append(error)
    return found


def last_finished(results: str | Path, passed_over: list[ProvenanceError] | None = None) -> list[Run]:
    """Per run directory under ``results/runs`` whose current attempt has not finished (no provenance.json: a later
    attempt, under another config, data or environment, failed, was stopped or still trains), its most recent
    finished attempt kept under attempts/: what that run last trained, which a listing keeps showing (the later
    attempt moved it aside, ``run.attempt.prepare``). Not a run the search stopped: its next rung's attempt never
    trains, and it is listed as stopped by the search. A record snakeddp did not write is as in ``find_runs``."""
    found = []
    halted = rungs.stopped(results)
    for run_dir in sorted(Path(results).glob(f"{RUNS}/*/")):
        if run_dir.name in halted:
            continue
        try:
            found += [standing] if (standing := standing_attempt(run_dir)) is not None else []
        except ProvenanceError as error:
            if passed_over is None:
                raise
            passed_over.append(error)
    return found


def standing_attempt(run_dir: str | Path, attempts: Sequence[Run] | None = None) -> Run | None:
    """The most recent finished attempt kept under ``<run_dir>/attempts/`` when the run's current attempt has not
    finished (no provenance.json): what the run last trained and its only model (``last_finished`` lists it, and
    `snakeddp prune` never removes it); None when the current attempt finished or no attempt did. ``attempts``:
    the run's ``earlier_attempts``, where the caller has read them already."""
    paths = RunPaths(run_dir)
    if paths.provenance.is_file():
        return None
    if attempts is None:
        attempts = earlier_attempts(run_dir) if paths.kept_records() else []
    return attempts[-1] if attempts else None


def earlier_attempts(run_dir: str | Path) -> list[Run]:
    """The finished attempts kept under ``<run_dir>/attempts/``, oldest first."""
    found = [load_run(path.parent) for path in RunPaths(run_dir).kept_records()]
    return sorted(found, key=lambda run: run.provenance["timing"]["finished_at"])


@dataclass(frozen=True)
class Unfinished:
    """An attempt kept under a run's attempts/ that never finished (no provenance.json): interrupted, failed or hung,
    then set aside by an attempt of another config (``run.attempt.prepare``, which takes it back, and resumes it from
    its last.ckpt, when its config comes back). What it trained is its metrics.csv."""

    paths: AttemptPaths
    metrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.paths.run_dir.name

    @property
    def run_dir(self) -> Path:
        """Its folder, as a kept finished attempt's ``Run.run_dir`` is."""
        return self.paths.folder

    @property
    def label(self) -> str:
        """``<run id>@<its folder>``, as `snakeddp runs --all` names earlier attempts."""
        return f"{self.run_id}@{self.paths.folder.name}"

    @property
    def ended_at(self) -> str:
        """When its last epoch ended (metrics.csv's finished_at), "" where it ended none."""
        return str(self.metrics[-1].get("finished_at") or "") if self.metrics else ""

    @property
    def pruned(self) -> dict[str, Any] | None:
        """What `snakeddp prune` removed of its checkpoints (its pruned.json), or None."""
        return pruned_record(self.paths)


def unfinished_attempts(run_dir: str | Path) -> list[Unfinished]:
    """The attempts kept under ``<run_dir>/attempts/`` that never finished, oldest first (by their last epoch's end;
    those that ended none first)."""
    found = [Unfinished(paths, read_metrics(paths.metrics)) for paths in RunPaths(run_dir).kept_unfinished()]
    return sorted(found, key=lambda attempt: attempt.ended_at)


def find_unfinished(results: str | Path) -> list[Unfinished]:
    """Every unfinished attempt kept in any run directory under ``results/runs``, by run id."""
    return [attempt for run_dir in sorted(Path(results).glob(f"{RUNS}/*/")) for attempt in unfinished_attempts(run_dir)]


def runs_from_provenance(paths: list[str | Path]) -> list[Run]:
    return [load_run(Path(path).parent) for path in paths]


def resolve_run(ref: str, results: str | Path = "results", stopped: bool = False) -> Run:
    """The run named by ``ref``: a run id under ``results/runs``, a run directory or its provenance.json; with
    ``stopped``, a run a search stopped is its record at the last rung it reached (``stopped_by_search``)."""
    results = Path(results)
    run_ref, at, short = ref.partition("@")
    if at and not Path(ref).exists():
        return _resolve_attempt(run_ref, short, results)
    candidates = [Path(ref), RunPaths.under(results, ref).folder]
    for candidate in candidates:
        run_dir = candidate.parent if candidate.name == PROVENANCE else candidate
        if RunPaths(run_dir).provenance.is_file():
            return load_run(run_dir)
    halted = stopped_by_search(results, ref)
    if halted is not None:
        entry, record = halted
        if stopped and record.is_file():
            return _rung_run(results, ref, record)
        raise RunNotFound(
            f"{ref!r} was stopped by the search at rung {entry['rung']} ({entry['epochs']} epochs, its configuration "
            f"ranked {entry['rank']}): it has no provenance.json, only its record at that rung ({record}). HINT: "
            f"`snakeddp compare {ref} RUN` compares that record with another run; removing search: from the config "
            "trains it to its whole budget (docs/search.md)."
        )
    known = [path.parent.name for path in run_records(results)]
    unfinished = RunPaths.under(results, ref).folder.is_dir()
    if unfinished and (standing := standing_attempt(RunPaths.under(results, ref).folder)) is not None:
        # What `snakeddp runs` lists for it: the hint named every run but this one.
        raise RunNotFound(
            f"{ref!r} has no provenance.json: its latest attempt has not finished (it failed, was stopped or "
            f"trains). HINT: its last finished attempt is {standing.label}, as `snakeddp runs` lists it: name that."
        )
    reason = "has no provenance.json (it has not finished)" if unfinished else "is not a run id or run directory"
    hint = (
        f"finished runs under {results}/runs: {', '.join(known)}" if known else f"no finished runs under {results}/runs"
    )
    raise RunNotFound(f"{ref!r} {reason}. HINT: {hint}; pass --results DIR for another results directory.")


def stopped_by_search(results: Path, run_id: str) -> tuple[dict[str, Any], Path] | None:
    """Where a search stopped ``run_id`` (``run.rungs.stopped``: rung, epochs, rank) and its record at that rung
    (results/search/<run>/epochs-<n>.json, ``workflow.plan.RUNG_RECORD``), or None."""
    entry = rungs.stopped(results).get(run_id)
    if entry is None:
        return None
    return entry, results / rungs.SEARCH_DIR / run_id / f"epochs-{entry['epochs']}.json"


def _rung_run(results: Path, run_id: str, path: Path) -> Run:
    """A run a search stopped, as its record at its last rung says, with that rung's metrics.csv where the run
    directory still holds that attempt."""
    record = read_json(path)
    run_dir = RunPaths.under(results, run_id)
    if not isinstance(record, dict) or record.get("run_id") != run_id:
        raise foreign_record(AttemptPaths(path.parent), f"{path.name} is not the record of run {run_id!r}")
    try:
        current = read_json(run_dir.finished).get("origin_sha256")
    except (OSError, ValueError, AttributeError):
        current = None
    metrics = read_metrics(run_dir.metrics) if current == record.get("origin_sha256") else []
    return Run(run_dir=run_dir.folder, provenance=record, metrics=metrics)


def _resolve_attempt(run_ref: str, short: str, results: Path) -> Run:
    run_dir = RunPaths.under(results, run_ref)
    current = [load_run(run_dir.folder)] if run_dir.provenance.is_file() else []
    attempts = current + earlier_attempts(run_dir.folder)
    # The name after @ that `runs --all` shows (ID-pruned: that attempt set aside, beside it trained again) or
    # any unique prefix of it or of the attempt id.
    shown = {id(run): run.label.partition("@")[2] or run.attempt_id for run in attempts}
    exact = [run for run in attempts if shown[id(run)] == short]
    matches = exact or [
        run for run in attempts if short and (shown[id(run)].startswith(short) or run.attempt_id.startswith(short))
    ]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(run.label for run in attempts) or "none"
    raise RunNotFound(
        f"'{run_ref}@{short}' names {'several' if matches else 'no'} finished attempt(s) of run {run_ref!r}. "
        f"HINT: its finished attempts: {known} (`snakeddp runs --all` lists every run's)."
    )
