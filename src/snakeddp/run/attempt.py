"""Which checkpoint a run may resume from, and where a run's earlier attempts are kept.

A run directory keeps its checkpoints across attempts (Snakemake never sees them as outputs, so
a failed or preempted attempt leaves them in place). They are only resumed when they were made
from the same attempt key (``attempt_key``: run config without scheduler requests, data
manifest, environment record, the user's model and data modules); ``run-state.json`` holds the
key of what they were made from. When the key differs, the old attempt moves, provenance and
all, to ``attempts/<key12>/`` (nothing is deleted); when the new key is one of the kept
attempts, that attempt moves back: it resumes if it was interrupted and is restored without
training if it had finished.

The training budget (``trainer.max_epochs``) is part of the key, so each budget is its own attempt,
but ``Identity.key_at`` gives the key the same run has at another budget: that is how
``provenance.lineage`` finds the finished attempt of a shorter budget to continue (``seed``).
"""

from __future__ import annotations

import copy
import fcntl
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from snakeddp.config import budget_continues, run_identity
from snakeddp.errors import RunStateError
from snakeddp.run import usercode
from snakeddp.run.layout import (
    ATTEMPT_FILES,
    ATTEMPTS,
    CHECKPOINT_GLOB,
    CHECKPOINTS,
    FINISHED,
    METRICS,
    SEEDING,
    STATE,
    STORED_AS,
    TRACE,
    AttemptPaths,
    RunPaths,
)
from snakeddp.run.runs import gone_checkpoint
from snakeddp.run.tries import newest_checkpoint
from snakeddp.util import rerun, schemas
from snakeddp.util.fsutil import atomic_write_json, copy_file, read_json
from snakeddp.util.hashing import sha256_file, sha256_json

STATE_SCHEMA = "run-state.schema.json"


@dataclass(frozen=True)
class Identity:
    """What a run's checkpoints are computed from: its config (``run_identity``), the data manifest's
    sha256, the environment record's ``hash`` and the user's own modules' sha256 (so editing the
    model's code never resumes an old checkpoint into it)."""

    run_config: Mapping[str, Any]
    data_sha256: str
    environment_hash: str | None
    user_code: Mapping[str, str | None]

    @classmethod
    def of(
        cls, run_config: Mapping[str, Any], manifest: Path, environment_record: Path | Mapping[str, Any] | None
    ) -> Identity:
        if isinstance(environment_record, Path):
            environment_record = read_json(environment_record) if environment_record.is_file() else None
        return cls(
            run_config=run_config,
            data_sha256=sha256_file(manifest),
            environment_hash=(environment_record or {}).get("hash"),
            user_code=user_modules_sha256(run_config),
        )

    @property
    def key(self) -> str:
        """The attempt key."""
        return self._key(self.run_config)

    @property
    def budget(self) -> int | None:
        return self.run_config.get("trainer", {}).get("max_epochs")

    def key_at(self, max_epochs: int) -> str | None:
        """The attempt key this run has at another budget; None when its budget does not continue
        (``config.budget_continues``), so that no other budget shares its lineage."""
        if not budget_continues(self.run_config):
            return None
        config = copy.deepcopy(dict(self.run_config))
        config["trainer"] = {**config.get("trainer", {}), "max_epochs": max_epochs}
        return self._key(config)

    def _key(self, config: Mapping[str, Any]) -> str:
        return sha256_json(
            {
                "config": run_identity(config),
                "data": self.data_sha256,
                "environment": self.environment_hash,
                "user_code": dict(self.user_code),
            }
        )


def attempt_key(
    run_config: Mapping[str, Any], manifest: Path, environment_record: Path | Mapping[str, Any] | None
) -> str:
    """The one key of what a run's checkpoints are computed from (``Identity``); launch, train and the
    AzureML submitter all call this."""
    return Identity.of(run_config, manifest, environment_record).key


def user_modules_sha256(run_config: Mapping[str, Any]) -> dict[str, str | None]:
    """sha256 of the module files of ``model.target`` and ``data.module``, with the user's own modules each imports
    (found, not imported: ``run.usercode``)."""
    targets = {"model.target": run_config["model"].get("target"), "data.module": run_config["data"].get("module")}
    return {key: _module_sha256(target) for key, target in targets.items() if target}


def _module_sha256(target: str) -> str | None:
    """The module file's sha256 where it imports no module of the user's (the key as before they were followed);
    else the sha256 of every such file's, by module name. None: not found (training reports the import error)."""
    files = usercode.user_files(target.partition(":")[0])
    if len(files) <= 1:
        return next((sha256_file(path) for path in files.values()), None)
    return sha256_json({name: sha256_file(path) for name, path in files.items()})


def attempt_id(key: str) -> str:
    """The short id of an attempt (its directory under attempts/ and the ``RUN@ID`` of the CLI)."""
    return key[:12]


@cache
def _state_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schemas.packaged(STATE_SCHEMA))


def _state(run_dir: Path) -> dict[str, Any] | None:
    """run-state.json, checked against its schema: a file snakeddp did not write stops the attempt with
    one line, and nothing is moved or deleted."""
    path = RunPaths(run_dir).state
    if not path.is_file():
        return None
    try:
        state = read_json(path)
    except (OSError, ValueError) as exc:
        problem = f"not JSON: {exc}"
    else:
        error = next(iter(sorted(_state_validator().iter_errors(state), key=lambda e: list(map(str, e.path)))), None)
        if error is None:
            return state
        problem = f"{'.'.join(map(str, error.absolute_path)) or 'top level'}: {error.message[:120]}"
    raise RunStateError(
        f"{path} is not a run state snakeddp wrote ({problem}). HINT: move it aside (mv {path} {path}.bad) and "
        f"rerun its train job ({rerun.forcing(RunPaths(run_dir).provenance)}): the attempt beside it is then "
        f"kept under {ATTEMPTS}/unknown/ and the run starts afresh."
    )


def inherited_epochs(run_dir: Path) -> list[dict[str, Any]]:
    """The epochs the current attempt took over from the finished attempt it continues (provenance's
    training.epochs_from, before this attempt's own epochs)."""
    return list((_state(run_dir) or {}).get("epochs_from", []))


def _store(run_dir: Path, key: str | None) -> None:
    """Move the attempt files in ``run_dir`` to attempts/<key12>/ (a timestamped name if that is taken)."""
    paths = RunPaths(run_dir)
    name = attempt_id(key) if key else "unknown"
    target = paths.attempt(name)
    if target.folder.exists():
        target = paths.attempt(f"{name}-{time.strftime('%Y%m%dT%H%M%S')}")
    target.folder.mkdir(parents=True)
    # A provenance.json Snakemake left (launch started by hand) goes too, never to describe the next attempt.
    if paths.provenance.exists() and not paths.finished.exists():
        paths.provenance.rename(target.provenance)
    paths.provenance.unlink(missing_ok=True)
    for entry in ATTEMPT_FILES:
        if (run_dir / entry).exists():
            (run_dir / entry).rename(target.folder / STORED_AS.get(entry, entry))


def _take_back(stored: Path, run_dir: Path) -> None:
    back = {stored_name: name for name, stored_name in STORED_AS.items()}
    for entry in stored.iterdir():
        entry.rename(run_dir / back.get(entry.name, entry.name))
    stored.rmdir()


def prepare(run_dir: Path, key: str, dataset: str | None = None) -> Path | None:
    """Called once per attempt by the single launcher process, before any rank starts. ``dataset``: the dataset id
    the attempt trains on, kept in its run-state.json, so an attempt set aside unfinished still names the data its
    last.ckpt goes on with (`snakeddp prune --data` keeps it).

    Returns the checkpoint to resume from, or None for a fresh start. Afterwards ``finished``
    says whether this key's attempt had already completed (then ``restore`` it, do not train).
    """
    ensure_no_live_attempt(run_dir)
    paths = RunPaths(run_dir)
    current = (_state(run_dir) or {}).get("resume_key")
    if current != key:
        if any((run_dir / name).exists() for name in ATTEMPT_FILES):
            _store(run_dir, current)
        stored = paths.attempt(attempt_id(key)).folder
        if stored.is_dir():
            _take_back(stored, run_dir)
    state = _state(run_dir) or {}
    kept = state if state.get("resume_key") == key else {}
    wanted = {**kept, "resume_key": key, **({"dataset": dataset} if dataset else {})}
    if state != wanted:
        atomic_write_json(paths.state, wanted)
    return newest_checkpoint(run_dir)


# What a continued attempt takes over from the one it continues. Not tracking/: its state.json names
# the kept attempt's MLflow / W&B runs, which the continued attempt must not append to.
CONTINUED = (CHECKPOINTS, METRICS, TRACE)


def seed(
    run_dir: Path,
    source: AttemptPaths,
    key: str,
    *,
    epochs_from: list[dict[str, Any]] | None = None,
    record: Mapping[str, Any] | None = None,
) -> bool:
    """Make ``run_dir``'s attempt of ``key`` (just ``prepare``d, with no checkpoint of its own) a copy
    of the finished attempt in ``source``, which keeps its own files (copies, not links: Lightning
    rewrites last.ckpt in place). With ``epochs_from`` it continues from the copied last.ckpt; with
    ``record`` it is finished, and that is its record. False (nothing changed) when ``source``
    vanished while it was copied: another run's job moved it."""
    staging = run_dir / SEEDING.format(pid=os.getpid())
    shutil.rmtree(staging, ignore_errors=True)
    names = CONTINUED if record is None else tuple(name for name in ATTEMPT_FILES if name not in (STATE, FINISHED))
    staging.mkdir()
    try:
        for name in names:
            _copy_entry(source.folder / name, staging / name)
    except FileNotFoundError:
        pass  # another run's job set the attempt aside while it was copied: the check below says so
    incomplete = record is None and not AttemptPaths(staging).last_checkpoint.is_file()
    if incomplete or not source.folder.is_dir():
        shutil.rmtree(staging, ignore_errors=True)
        return False
    paths = RunPaths(run_dir)
    for name in ATTEMPT_FILES:  # what a start of this key left without a checkpoint: nothing to keep
        target = run_dir / name
        if name != STATE and target.is_dir():
            shutil.rmtree(target)
        elif name != STATE:
            target.unlink(missing_ok=True)
    for entry in staging.iterdir():
        entry.rename(run_dir / entry.name)
    staging.rmdir()
    dataset = {"dataset": named} if (named := (_state(run_dir) or {}).get("dataset")) else {}
    state = {"resume_key": key, **dataset, **({"epochs_from": epochs_from} if epochs_from else {})}
    atomic_write_json(paths.state, state)
    if record is not None:
        atomic_write_json(paths.finished, dict(record))
    return True


def _copy_entry(source: Path, target: Path) -> None:
    """A file, or a folder's files (checkpoints/: only finished checkpoints, no partial saves)."""
    if source.is_dir():
        pattern = CHECKPOINT_GLOB if source.name == CHECKPOINTS else "*"
        for path in sorted(p for p in source.rglob(pattern) if p.is_file() and not p.is_symlink()):
            copy_file(path, _made(target / path.relative_to(source)))
    elif source.is_file() and not source.is_symlink():
        copy_file(source, _made(target))


def _made(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def finished_attempts(run_dir: Path) -> Iterable[tuple[AttemptPaths, Path]]:
    """Each finished attempt of a run directory and its record: the current one (finished.json) first,
    then those kept under attempts/ (provenance.json), by name."""
    paths = RunPaths(run_dir)
    if paths.finished.is_file():
        yield paths, paths.finished
    for record in sorted(paths.kept_records()):
        yield AttemptPaths(record.parent), record


def finished(run_dir: Path) -> bool:
    """Whether the attempt in ``run_dir`` completed (its record was kept)."""
    return RunPaths(run_dir).finished.is_file()


def keep_record(run_dir: Path) -> None:
    """Copy the run's fresh provenance.json as the attempt's own record (rank 0, after writing it).

    A copy, not a hard link: provenance.json is the workflow's output, which a user may edit or a
    tool rewrite in place, and that must never reach the record a restore publishes again."""
    paths = RunPaths(run_dir)
    copy_file(paths.provenance, paths.finished)


def _home(run_dir: Path, key: str) -> AttemptPaths:
    """Where this key's attempt lives: the run directory (a RunPaths), or its place under attempts/."""
    state = _state(run_dir)
    current = state is not None and state.get("resume_key") == key
    return RunPaths(run_dir) if current else RunPaths(run_dir).attempt(attempt_id(key))


def restorable(run_dir: Path, key: str) -> bool:
    """Whether this key's attempt already finished (read-only; ``prepare`` then restore it), with the checkpoints
    its record lists, as it hashed them: one whose checkpoints were pruned, lost or changed trains again
    (``provenance.lineage.prepare``, which a remote platform's launcher calls after this)."""
    home = _home(run_dir, key)
    # The current attempt's own record is finished.json; a kept one's is its provenance.json.
    path = home.finished if isinstance(home, RunPaths) else home.provenance
    try:
        record = read_json(path)
    except (OSError, ValueError):
        return path.is_file()  # a record restore refuses in its own line
    return not isinstance(record, dict) or gone_checkpoint(home, record, hashed=True) is None


def resumable(run_dir: Path, key: str) -> Path | None:
    """The checkpoint this key's attempt resumes (``tries.newest_checkpoint``), in the run directory or kept
    under attempts/ (read-only)."""
    return newest_checkpoint(_home(run_dir, key).folder)


def resume_checkpoint(run_dir: Path, key: str) -> Path | None:
    """Read-only check every rank makes: resume from the attempt's newest checkpoint (``tries.newest_checkpoint``:
    last.ckpt, or a top-k one of a later step) only if it was made from ``key``."""
    state = _state(run_dir)
    newest = newest_checkpoint(run_dir)
    if state is not None and state.get("resume_key") != key:
        raise RunStateError(
            f"{run_dir} holds an attempt made from a different config, data or environment. "
            f"HINT: start runs with `python -m snakeddp.launch` (it moves old attempts to {ATTEMPTS}/), "
            f"or move {run_dir} away."
        )
    if newest is not None and state is None:
        raise RunStateError(
            f"{newest} exists but {RunPaths(run_dir).state} does not, so it cannot be told what it was trained "
            "from. HINT: move the checkpoints away to start fresh."
        )
    return newest


def mark(run_dir: Path, key: str) -> None:
    """Record the key for a run started without the launcher (rank 0 only)."""
    if _state(run_dir) is None:
        atomic_write_json(RunPaths(run_dir).state, {"resume_key": key})


def no_lock_warning(run_dir: Path) -> str:
    return (
        f"the file system of {run_dir} does not support flock, so a second attempt of this run started "
        "while one still trains (a retry, a double submission) cannot be refused; start one at a time."
    )


def _lock(run_dir: Path, mode: int) -> int | None:
    """flock ``mode`` on the run's lock file; the fd, or None where the filesystem has no locks."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(RunPaths(run_dir).lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError:
        os.close(fd)
        return None
    return fd


def ensure_no_live_attempt(run_dir: Path) -> None:
    """Refuse to start while any process of an earlier attempt still trains in this run directory.

    Every training process holds a shared lock for its lifetime (``hold_attempt_lock``), so an
    exclusive lock succeeds only when none is left, e.g. after its launcher was killed.
    """
    with no_live_attempt(run_dir):
        pass


@contextmanager
def no_live_attempt(run_dir: Path) -> Iterator[None]:
    """Hold the run's exclusive lock for the block, refusing in one line while an attempt trains:
    what the block writes (run.yaml) can then never change under a live attempt, which cannot
    start (``hold_attempt_lock``) until the block is done."""
    try:
        fd = _lock(run_dir, fcntl.LOCK_EX)
    except BlockingIOError:
        raise RunStateError(
            f"another attempt of this run is still training in {run_dir}. HINT: wait for it to finish, "
            f"or find it with `fuser {RunPaths(run_dir).lock}` and stop it."
        ) from None
    if fd is None:
        print(f"snakeddp: warning: {no_lock_warning(run_dir)}", file=sys.stderr, flush=True)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def is_live(run_dir: Path) -> bool:
    """Whether a process of an attempt holds this run's lock now (read-only: creates nothing)."""
    try:
        fd = os.open(RunPaths(run_dir).lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def hold_attempt_lock(run_dir: Path) -> int | None:
    """Hold a shared lock on the run directory until this process exits (None: no flock here)."""
    try:
        return _lock(run_dir, fcntl.LOCK_SH)
    except BlockingIOError:
        raise RunStateError(
            f"{run_dir} is being prepared by another launcher, or its run.yaml written. HINT: run snakemake "
            "again once that job is done."
        ) from None
