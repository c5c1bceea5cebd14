"""Capture the environment a stage runs in: resolved packages, interpreter, accelerator stack.

The record's hash covers what decides a run's numerics (package versions, python, torch's
CUDA/cuDNN/NCCL builds, the lock file), not when or where it was captured, so recapturing
an unchanged environment gives the same hash and retrains nothing.
"""

from __future__ import annotations

from pathlib import Path

from snakeddp.fsutil import atomic_write_json
from snakeddp.hashing import sha256_file, sha256_json
from snakeddp.provenance import installed_packages
from snakeddp.provenance import versions as stack_versions


def capture(stage: str, lock_path: str | Path, out_path: str | Path) -> dict:
    versions = stack_versions()
    identity = {
        "packages": installed_packages(),
        "python": versions["python"],
        "torch": versions["torch"],
        "cuda": versions["cuda"],
        "cudnn": versions["cudnn"],
        "lock_sha256": sha256_file(lock_path),
    }
    record = {"stage": stage, **identity, "versions": versions, "hash": sha256_json(identity)}
    atomic_write_json(out_path, record)
    return record
