"""Which checkpoint a run may resume from, and where a run's earlier attempts are kept.

A run directory keeps its checkpoints across attempts (Snakemake never sees them as outputs, so
a failed or preempted attempt leaves them in place). They are only resumed when they were made
from the same attempt key (``attempt_key``: run config without scheduler requests, data
manifest, environment record, the user's model and data modules); ``run-state.json`` holds the
key of what they were made from. When the key differs, the old attempt moves, provenance and
all, to ``attempts/<key12>/`` (nothing is deleted); when the new key is one of the kept
attempts, that attempt moves back: it resumes if it was interrupted and is restored without
training if it had finished.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.config import run_identity
from snakeddp.errors import RunStateError
from snakeddp.run.layout import ATTEMPT_FILES, ATTEMPTS, STORED_AS, AttemptPaths, RunPaths
from snakeddp.util.fsutil import atomic_write_json, copy_file, read_json
from snakeddp.util.hashing import sha256_file, sha256_json


def attempt_key(
    run_config: Mapping[str, Any], manifest: Path, environment_record: Path | Mapping[str, Any] | None
) -> str:
    """The one key of what a run's checkpoints are computed from; launch, train and the AzureML
    submitter all call this. The environment enters by its record's ``hash``; the user's own
    modules by their sha256, so editing the model's code never resumes an old checkpoint into it."""
    if isinstance(environment_record, Path):
        environment_record = read_json(environment_record) if environment_record.is_file() else None
    return sha256_json(
        {
            "config": run_identity(run_config),
            "data": sha256_file(manifest),
            "environment": (environment_record or {}).get("hash"),
            "user_code": user_modules_sha256(run_config),
        }
    )


def user_modules_sha256(run_config: Mapping[str, Any]) -> dict[str, str | None]:
    """sha256 of the module files of ``model.target`` and ``data.module`` (found, not imported)."""
    targets = {"model.target": run_config["model"].get("target"), "data.module": run_config["data"].get("module")}
    return {key: _module_sha256(target) for key, target in targets.items() if target}


def _module_sha256(target: str) -> str | None:
    try:
        spec = importlib.util.find_spec(target.partition(":")[0])
    except (ImportError, ValueError):
        return None  # training reports the import error with its hint
    origin = spec.origin if spec else None
    return sha256_file(origin) if origin and Path(origin).is_file() else None


def attempt_id(key: str) -> str:
    """The short id of an attempt (its directory under attempts/ and the ``RUN@ID`` of the CLI)."""
    return key[:12]


def _state(run_dir: Path) -> dict[str, Any] | None:
    path = RunPaths(run_dir).state
    return read_json(path) if path.is_file() else None


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


def prepare(run_dir: Path, key: str) -> Path | None:
    """Called once per attempt by the single launcher process, before any rank starts.

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
    atomic_write_json(paths.state, {"resume_key": key})
    return paths.last_checkpoint if paths.last_checkpoint.is_file() else None


def finished(run_dir: Path) -> bool:
    """Whether the attempt in ``run_dir`` completed (its record was kept)."""
    return RunPaths(run_dir).finished.is_file()


def keep_record(run_dir: Path) -> None:
    """Copy the run's fresh provenance.json as the attempt's own record (rank 0, after writing it).

    A copy, not a hard link: provenance.json is the workflow's output, which a user may edit or a
    tool rewrite in place, and that must never reach the record a restore publishes again."""
    paths = RunPaths(run_dir)
    copy_file(paths.provenance, paths.finished)


def restore(run_dir: Path, key: str) -> str:
    """Publish the finished attempt's record as provenance.json again, saying it was restored, not
    trained; returns the line the log shows."""
    paths = RunPaths(run_dir)
    record = read_json(paths.finished)
    record["attempt"] = {
        "id": attempt_id(key),
        "restored": True,
        "restored_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic_write_json(paths.provenance, record)
    return (
        f"attempt {attempt_id(key)} already finished with this config, data and environment "
        f"({record['training']['epochs_completed']} epochs): restored it, nothing trained"
    )


def _home(run_dir: Path, key: str) -> AttemptPaths:
    """Where this key's attempt lives: the run directory (a RunPaths), or its place under attempts/."""
    state = _state(run_dir)
    current = state is not None and state.get("resume_key") == key
    return RunPaths(run_dir) if current else RunPaths(run_dir).attempt(attempt_id(key))


def restorable(run_dir: Path, key: str) -> bool:
    """Whether this key's attempt already finished (read-only; ``prepare`` then ``restore`` it)."""
    home = _home(run_dir, key)
    # The current attempt's own record is finished.json; a kept one's is its provenance.json.
    return (home.finished if isinstance(home, RunPaths) else home.provenance).is_file()


def resumable(run_dir: Path, key: str) -> Path | None:
    """The last.ckpt of this key's attempt, in the run directory or kept under attempts/ (read-only)."""
    last = _home(run_dir, key).last_checkpoint
    return last if last.is_file() else None


def resume_checkpoint(run_dir: Path, key: str) -> Path | None:
    """Read-only check every rank makes: resume from last.ckpt only if it was made from ``key``."""
    state = _state(run_dir)
    last = RunPaths(run_dir).last_checkpoint
    if state is not None and state.get("resume_key") != key:
        raise RunStateError(
            f"{run_dir} holds an attempt made from a different config, data or environment. "
            f"HINT: start runs with `python -m snakeddp.launch` (it moves old attempts to {ATTEMPTS}/), "
            f"or move {run_dir} away."
        )
    if last.is_file() and state is None:
        raise RunStateError(
            f"{last} exists but {RunPaths(run_dir).state} does not, so it cannot be told what it was trained "
            "from. HINT: move the checkpoints away to start fresh."
        )
    return last if last.is_file() else None


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
    try:
        fd = _lock(run_dir, fcntl.LOCK_EX)
    except BlockingIOError:
        raise RunStateError(
            f"another attempt of this run is still training in {run_dir}. HINT: wait for it to finish, "
            f"or find it with `fuser {RunPaths(run_dir).lock}` and stop it."
        ) from None
    if fd is None:
        print(f"snakeddp: warning: {no_lock_warning(run_dir)}", file=sys.stderr, flush=True)
    else:
        os.close(fd)


def hold_attempt_lock(run_dir: Path) -> int | None:
    """Hold a shared lock on the run directory until this process exits (None: no flock here)."""
    try:
        return _lock(run_dir, fcntl.LOCK_SH)
    except BlockingIOError:
        raise RunStateError(f"{run_dir} is being prepared by another launcher; retry in a moment") from None
