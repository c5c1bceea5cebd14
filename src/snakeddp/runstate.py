"""Which checkpoint a run may resume from.

A run directory keeps its checkpoints across attempts (Snakemake never sees them as outputs, so
a failed or preempted attempt leaves them in place). They are only resumed when they were made
from the same run config, data manifest and environment: ``run-state.json`` holds the key of
what they were made from. When the key differs, the old attempt is moved to ``superseded/``
(nothing is deleted) and the run starts fresh.
"""

from __future__ import annotations

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
    run_dir.mkdir(parents=True, exist_ok=True)
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
