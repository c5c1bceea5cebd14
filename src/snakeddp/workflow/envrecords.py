"""Environment records that go stale: a record of Snakemake's own interpreter is captured again
when that interpreter's packages change.

``env_capture`` reruns when the lock changes (its parameter). A venv can change without the lock
(``make setup-dev`` added 138 packages): the record then described packages the runs no longer
ran on, while every run's provenance cited its hash. A record made by this interpreter (the jobs
of the local and Slurm profiles without ``--sdm``) is compared with the packages installed now;
one that differs is removed before any job runs, so Snakemake captures it again, and the runs
that cite it train again under the new hash (or are restored, if they once finished on it).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from snakeddp.environment.lock import installed
from snakeddp.util.fsutil import read_json


def differences(record: Mapping, packages: Mapping[str, str]) -> int:
    """How many packages differ between ``record`` and ``packages`` (name -> version)."""
    recorded = record.get("packages") or {}
    return sum(recorded.get(name) != packages.get(name) for name in recorded.keys() | packages.keys())


def made_here(record: Mapping, executable: str = sys.executable) -> bool:
    """Whether ``record`` describes this interpreter (not a conda env, a container or AzureML's)."""
    recorded = (record.get("versions") or {}).get("executable")
    return bool(recorded) and Path(recorded).parent == Path(executable).parent


def refresh(records: Iterable[Path], remove: bool) -> list[str]:
    """The lines to print for each record of this interpreter whose packages changed; with
    ``remove`` (a run that executes jobs) those records are removed, so they are captured again."""
    lines = []
    packages: dict[str, str] | None = None
    for path in records:
        if not path.is_file():
            continue
        try:
            record = read_json(path)
        except (OSError, ValueError):  # not a record (`snakemake --touch` leaves empty files): not ours to judge
            continue
        if not isinstance(record, dict) or not made_here(record):
            continue
        if packages is None:
            packages = {key: pin.version for key, pin in installed().items()}
        count = differences(record, packages)
        if not count:
            continue
        if remove:
            path.unlink()
            lines.append(f"environment: {count} package(s) changed since {path} was recorded: recording it again")
        else:
            lines.append(f"environment: {count} package(s) changed since {path} was recorded; a run records it again")
    return lines
