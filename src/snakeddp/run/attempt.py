"""Which checkpoint a run may resume from.

A run directory keeps its checkpoints across attempts (Snakemake never sees them as outputs, so
a failed or preempted attempt leaves them in place). They are only resumed when they were made
from the same run config, data manifest and environment: ``run-state.json`` holds the key of
what they were made from. When the key differs, the old attempt is moved to ``superseded/``
(nothing is deleted) and the run starts fresh.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.fsutil import atomic_write_json, read_json
from snakeddp.hashing import sha256_json

STATE_FILE = "run-state.json"
CHECKPOINT_DIR = "checkpoints"
LAST = "last.ckpt"
# What an attempt leaves in the run directory; moved aside together when superseded.
ATTEMPT_FILES = (CHECKPOINT_DIR, "metrics.csv", "trace", "tracking", STATE_FILE)


class RunStateError(RuntimeError):
    """The run directory holds checkpoints whose origin cannot be confirmed."""


def resume_key(run_config: Mapping[str, Any], manifest_sha256: str, environment_hash: str | None) -> str:
    return sha256_json({"config": run_config, "data": manifest_sha256, "environment": environment_hash})


def _state(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / STATE_FILE
    return read_json(path) if path.is_file() else None


def prepare(run_dir: Path, key: str) -> Path | None:
    """Called once per attempt by the single launcher process, before any rank starts.

    Returns the checkpoint to resume from, or None for a fresh start.
    """
    ensure_no_live_attempt(run_dir)
    state = _state(run_dir)
    leftovers = [run_dir / name for name in ATTEMPT_FILES if (run_dir / name).exists()]
    if leftovers and (state is None or state.get("resume_key") != key):
        old = (state or {}).get("resume_key", "unknown")[:10]
        target = run_dir / "superseded" / f"{time.strftime('%Y%m%dT%H%M%S')}-{old}"
        target.mkdir(parents=True)
        for path in leftovers:
            path.rename(target / path.name)
    atomic_write_json(run_dir / STATE_FILE, {"resume_key": key})
    last = run_dir / CHECKPOINT_DIR / LAST
    return last if last.is_file() else None


def resume_checkpoint(run_dir: Path, key: str) -> Path | None:
    """Read-only check every rank makes: resume from last.ckpt only if it was made from ``key``."""
    state = _state(run_dir)
    last = run_dir / CHECKPOINT_DIR / LAST
    if state is not None and state.get("resume_key") != key:
        raise RunStateError(
            f"{run_dir} holds an attempt made from a different config, data or environment. "
            "HINT: start runs with `python -m snakeddp.launch` (it moves old attempts to superseded/), "
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
