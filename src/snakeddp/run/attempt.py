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
from snakeddp.util.fsutil import atomic_write_json, copy_file, read_json
from snakeddp.util.hashing import sha256_file, sha256_json

STATE_FILE = "run-state.json"
CHECKPOINT_DIR = "checkpoints"
LAST = "last.ckpt"
PROVENANCE = "provenance.json"
# A copy of provenance.json that the attempt keeps: Snakemake deletes provenance.json (the
# train rule's output) before it reruns the rule, and the attempt's record must survive that.
FINISHED = "finished.json"
ATTEMPTS_DIR = "attempts"
# What an attempt leaves in the run directory; moved together into attempts/<key12>/.
ATTEMPT_FILES = (CHECKPOINT_DIR, "metrics.csv", "trace", "tracking", STATE_FILE, FINISHED)
# In attempts/<key12>/ the finished record is provenance.json again, so a kept attempt reads like a run.
STORED_AS = {FINISHED: PROVENANCE}


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
    path = run_dir / STATE_FILE
    return read_json(path) if path.is_file() else None


def _store(run_dir: Path, key: str | None) -> None:
    """Move the attempt files in ``run_dir`` to attempts/<key12>/ (a timestamped name if that is taken)."""
    name = attempt_id(key) if key else "unknown"
    target = run_dir / ATTEMPTS_DIR / name
    if target.exists():
        target = target.with_name(f"{name}-{time.strftime('%Y%m%dT%H%M%S')}")
    target.mkdir(parents=True)
    # A provenance.json Snakemake left (launch started by hand) goes too, never to describe the next attempt.
    published = run_dir / PROVENANCE
    if published.exists() and not (run_dir / FINISHED).exists():
        published.rename(target / PROVENANCE)
    published.unlink(missing_ok=True)
    for entry in ATTEMPT_FILES:
        if (run_dir / entry).exists():
            (run_dir / entry).rename(target / STORED_AS.get(entry, entry))


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
    current = (_state(run_dir) or {}).get("resume_key")
    if current != key:
        if any((run_dir / name).exists() for name in ATTEMPT_FILES):
            _store(run_dir, current)
        stored = run_dir / ATTEMPTS_DIR / attempt_id(key)
        if stored.is_dir():
            _take_back(stored, run_dir)
    atomic_write_json(run_dir / STATE_FILE, {"resume_key": key})
    last = run_dir / CHECKPOINT_DIR / LAST
    return last if last.is_file() else None


def finished(run_dir: Path) -> bool:
    """Whether the attempt in ``run_dir`` completed (its record was kept)."""
    return (run_dir / FINISHED).is_file()


def keep_record(run_dir: Path) -> None:
    """Copy the run's fresh provenance.json as the attempt's own record (rank 0, after writing it).

    A copy, not a hard link: provenance.json is the workflow's output, which a user may edit or a
    tool rewrite in place, and that must never reach the record a restore publishes again."""
    copy_file(run_dir / PROVENANCE, run_dir / FINISHED)


def restore(run_dir: Path, key: str) -> str:
    """Publish the finished attempt's record as provenance.json again, saying it was restored, not
    trained; returns the line the log shows."""
    record = read_json(run_dir / FINISHED)
    record["attempt"] = {
        "id": attempt_id(key),
        "restored": True,
        "restored_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic_write_json(run_dir / PROVENANCE, record)
    return (
        f"attempt {attempt_id(key)} already finished with this config, data and environment "
        f"({record['training']['epochs_completed']} epochs): restored it, nothing trained"
    )


def _home(run_dir: Path, key: str) -> Path:
    """Where this key's attempt lives: the run directory, or its place under attempts/."""
    state = _state(run_dir)
    return run_dir if state and state.get("resume_key") == key else run_dir / ATTEMPTS_DIR / attempt_id(key)


def restorable(run_dir: Path, key: str) -> bool:
    """Whether this key's attempt already finished (read-only; ``prepare`` then ``restore`` it)."""
    home = _home(run_dir, key)
    return (home / (FINISHED if home == run_dir else PROVENANCE)).is_file()


def resumable(run_dir: Path, key: str) -> Path | None:
    """The last.ckpt of this key's attempt, in the run directory or kept under attempts/ (read-only)."""
    last = _home(run_dir, key) / CHECKPOINT_DIR / LAST
    return last if last.is_file() else None


def resume_checkpoint(run_dir: Path, key: str) -> Path | None:
    """Read-only check every rank makes: resume from last.ckpt only if it was made from ``key``."""
    state = _state(run_dir)
    last = run_dir / CHECKPOINT_DIR / LAST
    if state is not None and state.get("resume_key") != key:
        raise RunStateError(
            f"{run_dir} holds an attempt made from a different config, data or environment. "
            f"HINT: start runs with `python -m snakeddp.launch` (it moves old attempts to {ATTEMPTS_DIR}/), "
            f"or move {run_dir} away."
        )
    if last.is_file() and state is None:
        raise RunStateError(
            f"{last} exists but {run_dir / STATE_FILE} does not, so it cannot be told what it was trained "
            "from. HINT: move the checkpoints away to start fresh."
        )
    return last if last.is_file() else None


def mark(run_dir: Path, key: str) -> None:
    """Record the key for a run started without the launcher (rank 0 only)."""
    if _state(run_dir) is None:
        atomic_write_json(run_dir / STATE_FILE, {"resume_key": key})


LOCK_FILE = ".attempt.lock"


def no_lock_warning(run_dir: Path) -> str:
    return (
        f"the file system of {run_dir} does not support flock, so a second attempt of this run started "
        "while one still trains (a retry, a double submission) cannot be refused; start one at a time."
    )


def _lock(run_dir: Path, mode: int) -> int | None:
    """flock ``mode`` on the run's lock file; the fd, or None where the filesystem has no locks."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
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
            f"or find it with `fuser {run_dir / LOCK_FILE}` and stop it."
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
