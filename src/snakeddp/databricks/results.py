"""Copy a finished Databricks run's directory back into ``results/runs/<run>/``.

The remote listing is someone else's text: a name that leads out of the run directory is refused,
only the attempt's own files (checkpoints/, metrics.csv, run-state.json, ...) come back, each must
arrive at the size listed, and the checkpoints must match the sha256 and size their provenance.json
records. A run that did not succeed brings back what it saved (its checkpoints, to resume from) but
never its provenance.json or finished.json: a partial attempt is never taken for a finished one.
The files land in a fresh download folder first and move in as every remote job's do
(``snakeddp.remote.attempt.collect``), provenance.json last.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from snakeddp.databricks import DatabricksError, files
from snakeddp.remote import attempt
from snakeddp.run.layout import ATTEMPT_FILES, FAILURE, FINISHED, PROVENANCE
from snakeddp.util.fsutil import read_json
from snakeddp.util.hashing import sha256_file
from snakeddp.util.paths import inside

WANTED = (*ATTEMPT_FILES, PROVENANCE, FAILURE)
RETRY = "HINT: rerun the same command: the run resumes from what its last attempt saved."
AGAIN = "HINT: rerun the same command: the run is submitted again, and nothing of this copy is kept."


def fetch(w: Any, remote_dir: str, download: Path) -> Path:
    """The remote run directory's attempt files into an emptied ``download`` folder: the whole listing
    checked before the first file is copied, and the folder removed again when any file fails."""
    if download.exists():
        shutil.rmtree(download)
    listing = list(files.walk(w, remote_dir))
    download.mkdir(parents=True)
    try:
        for path, listed in listing:
            relative = path.removeprefix(f"{remote_dir}/")
            if relative.split("/")[0] not in WANTED:
                continue
            target = inside(download, relative)
            if target is None:  # walk took it for a name in the folder; the local side says no
                raise DatabricksError(
                    f"{path} would be copied outside {download}; snakeddp writes nothing outside a run's directory. "
                    f"HINT: remove {path!r} from {remote_dir} on Databricks, then rerun."
                )
            got = files.download(w, path, target)
            if got != listed:
                raise DatabricksError(f"{path} came back with {got} bytes, but its listing says {listed}. {RETRY}")
    except BaseException:
        shutil.rmtree(download, ignore_errors=True)
        raise
    return download


def failure_line(download: Path) -> str | None:
    """The first failing rank's own line, as the job's launch left it."""
    path = download / FAILURE
    said = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
    return said.splitlines()[0] if said else None


def check_checkpoints(download: Path) -> None:
    """Every checkpoint provenance.json records is here at its size and sha256; else the copy is refused,
    its records dropped with it, so nothing of it can pass for a finished run."""
    try:
        compare_checkpoints(download)
    except DatabricksError:
        for name in (PROVENANCE, FINISHED):
            (download / name).unlink(missing_ok=True)
        raise


def compare_checkpoints(download: Path) -> None:
    provenance = read_json(download / PROVENANCE)
    training = provenance.get("training") or {}
    records = [training.get("best_checkpoint"), training.get("last_checkpoint"), *training.get("checkpoints", [])]
    for record in filter(None, records):
        path = inside(download, record.get("path"))
        if path is None or not path.is_file():
            raise DatabricksError(
                f"provenance.json records the checkpoint {record.get('path')!r}, which did not come back. {AGAIN}"
            )
        if path.stat().st_size != record["bytes"] or sha256_file(path) != record["sha256"]:
            raise DatabricksError(
                f"{record['path']} came back different from what provenance.json records (size or sha256). {AGAIN}"
            )


def collect(download: Path, run_dir: Path, succeeded: bool) -> bool:
    """Move what came back into ``run_dir``; a run that did not succeed keeps no finished record."""
    if succeeded and (download / PROVENANCE).is_file():
        check_checkpoints(download)
    else:
        for name in (PROVENANCE, FINISHED):
            (download / name).unlink(missing_ok=True)
    return attempt.collect(download, run_dir)
