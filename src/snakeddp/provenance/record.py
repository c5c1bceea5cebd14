"""What a run was made from, written by rank 0 of the run itself when training ends.

Nothing here is reconstructed afterwards: the code commit, environment and hosts are read by
the process that trained, and the checkpoint hashes from the files it wrote. Secret-looking
variables and URL credentials never reach the record (see ``redact``).
"""

from __future__ import annotations

import getpass
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp import __version__
from snakeddp.environment.capture import accelerator_stack
from snakeddp.environment.lock import installed
from snakeddp.run import variables
from snakeddp.run.attempt import CHECKPOINT_DIR, PROVENANCE
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.hashing import sha256_file, sha256_json
from snakeddp.util.redact import recorded_environment, scrub

PROVENANCE_FORMAT = "snakeddp-provenance/1"
FILE_NAME = PROVENANCE
# Package lists (name -> version) of the environment: package names are never masked as secrets.
PACKAGE_LISTINGS = frozenset({"packages", "conda_packages"})


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_info(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The commit of the code that ran. Platforms that ship code without .git (AzureML) pass it
    in SNAKEDDP_CODE_COMMIT / SNAKEDDP_CODE_DIRTY, captured by the submitter from its checkout."""
    if env.get(variables.CODE_COMMIT):
        return {
            "commit": env[variables.CODE_COMMIT],
            "dirty": env.get(variables.CODE_DIRTY) == "1",
            "source": "submitter",
            "snakeddp_version": __version__,
        }
    here = Path(__file__).resolve().parent
    commit = _git(["rev-parse", "HEAD"], here)
    status = _git(["status", "--porcelain", "--untracked-files=no"], here) if commit else None
    return {
        "commit": commit,
        "dirty": bool(status) if commit else None,
        "source": "git" if commit else None,
        "snakeddp_version": __version__,
    }


def versions() -> dict[str, Any]:
    """The interpreter and the accelerator stack this process runs on."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "executable": sys.executable,
        **accelerator_stack(),
    }


def installed_packages() -> dict[str, str]:
    """Every distribution this interpreter can import, by canonical name."""
    return {name: pin.version for name, pin in installed(sys.path).items()}


def environment_info(record_path: Path | None) -> dict[str, Any]:
    """Versions of what ran, plus the hash of the captured stage environment when there is one."""
    info = {**versions(), "packages": installed_packages()}
    info["packages_sha256"] = sha256_json(info["packages"])
    if record_path is not None and record_path.is_file():
        record = read_json(record_path)
        info["record"] = str(record_path)
        info["environment_hash"] = record.get("hash")
        info["lock_sha256"] = record.get("lock_sha256")
    else:
        info["record"], info["environment_hash"], info["lock_sha256"] = None, None, None
    return info


def file_record(path: Path | str | None, run_dir: Path) -> dict[str, Any] | None:
    if not path:
        return None
    path = Path(path)
    if not path.is_file():
        return None
    try:
        shown = str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        shown = str(path)
    return {"path": shown, "sha256": sha256_file(path), "bytes": path.stat().st_size}


def cluster_variables(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    return recorded_environment(env)


def checkpoint_records(run_dir: Path) -> list[dict[str, Any]]:
    """Every checkpoint kept in the run's checkpoints/ (top-k and last), hashed."""
    return [file_record(path, run_dir) for path in sorted((run_dir / CHECKPOINT_DIR).glob("*.ckpt"))]


def user() -> str | None:
    """The operating-system user the run ran as (the agent of the run), or None in a nameless container."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def write(run_dir: Path, record: dict[str, Any]) -> Path:
    record = scrub({"format": PROVENANCE_FORMAT, **record}, listings=PACKAGE_LISTINGS)
    return atomic_write_json(run_dir / FILE_NAME, record)
