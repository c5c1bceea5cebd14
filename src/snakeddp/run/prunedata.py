"""``snakeddp prune --data``: remove the dataset folders nothing needs any more, only when asked.

A dataset's folder is named by a hash of what shapes its bytes (``config.dataset_id``: its parameters, a
table's checksum), so every change of them makes a new folder under results/data/ and leaves the old one. A
folder stays while anything may read it: the config plans it (the workflow asks for it), a run's current
attempt trained on it or is about to (its provenance.json or finished.json, its run.yaml), an earlier
attempt kept under attempts/ whose checkpoints are still there trained on it (it may be restored or continued),
or an unfinished attempt kept there with its last.ckpt names it in its run-state.json (its config's next attempt
resumes it). An earlier attempt whose checkpoints were pruned can be none of these, so its data may go too, as may
an unfinished attempt's that names none (begun before run-state.json kept the dataset). Records name their
dataset by the manifest's folder and by ``data.dataset``: only names are read from them, no path is followed.

Before any folder goes, results/data/pruned.json (schemas/data-pruned.schema.json) records it: its name, each
manifest's sha256, its size, when and by which command. `snakeddp verify` of a run whose data is gone reads it
to say the data was pruned, not lost (``pruned_dataset``). An entry counts only while its folder is gone: a
dataset made again (the data rules make any missing dataset the config asks for) is verified as any other, and
the next prune drops the entries of folders that are back.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from snakeddp.errors import RunStateError
from snakeddp.run.layout import RUNS, AttemptPaths, RunPaths
from snakeddp.run.runfile import RunFile
from snakeddp.run.runs import listed_checkpoints
from snakeddp.run.tries import newest_checkpoint
from snakeddp.util import schemas
from snakeddp.util.fsutil import atomic_write_json, read_json, tree_size
from snakeddp.util.hashing import sha256_file
from snakeddp.util.paths import inside
from snakeddp.util.schemas import read_checked

#: The data stage's folder in the results directory (results/data/<dataset>/: rules/data.smk).
DATA = "data"
RECORD = "pruned.json"
SCHEMA_FILE = "data-pruned.schema.json"
FORMAT = "snakeddp-data-pruned/1"
# A dataset id (config.dataset_id): <name>-<10 hex digits>. Nothing else under results/data/ is ever removed.
DATASET_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*-[0-9a-f]{10}")
# What a run's provenance names as its data.manifest in a dataset's folder.
MANIFESTS = ("manifest-*.json", "module.json")


class DataPruneError(RunStateError):
    """Datasets that cannot be pruned as asked; the message says what to do."""


@dataclass(frozen=True)
class Dataset:
    """One dataset folder under results/data/ that pruning removes (or removed)."""

    path: Path
    size: int

    @property
    def name(self) -> str:
        return self.path.name


def schema() -> dict[str, Any]:
    return schemas.packaged(SCHEMA_FILE)


def record_path(results: Path) -> Path:
    return Path(results) / DATA / RECORD


def read_record(path: Path) -> list[dict[str, Any]]:
    """The entries of a data pruned.json, oldest first ([] where none was written); one snakeddp did not write
    is refused."""
    if not path.is_file():
        return []
    record, problem = read_checked(path, schema())
    if problem is None:
        return list(record["datasets"])
    raise DataPruneError(
        f"{path} is not a record of pruned datasets snakeddp wrote ({problem}). HINT: move it aside (mv {path} "
        f"{path}.bad) and run `snakeddp prune --data` again: `snakeddp verify` then tells the datasets it named only "
        "as missing."
    )


def pruned_dataset(results: Path, manifest: Path, sha256: str) -> dict[str, Any] | None:
    """The entry of results/data/pruned.json that says `snakeddp prune --data` removed the dataset of ``manifest``
    (a run's data.manifest, inside ``results``/data/) holding a manifest of that ``sha256``; None where the folder
    is there (made again, or never pruned: what is missing in it is missing) or no such entry is recorded."""
    data = Path(results) / DATA
    folder = Path(manifest).parent
    if folder.parent.resolve() != data.resolve() or folder.exists():
        return None
    try:
        entries = read_record(data / RECORD)
    except DataPruneError:
        return None
    matching = [
        entry
        for entry in entries
        if entry["name"] == folder.name and {"file": manifest.name, "sha256": sha256} in entry["manifests"]
    ]
    return matching[-1] if matching else None


def pruned_when(entry: dict[str, Any]) -> str:
    """``by `snakeddp prune --data` on <date>`` of an entry."""
    return f"by `snakeddp prune --data` on {entry['pruned_at'][:10]}"


def needed(results: Path) -> set[str]:
    """The dataset ids that the runs under ``results`` may still read: each run's current attempt's (finished, or
    its run.yaml's), each earlier attempt's whose checkpoints are still there, and each unfinished attempt's kept
    with its last.ckpt."""
    names: set[str] = set()
    for run_dir in sorted((Path(results) / RUNS).glob("*/")):
        paths = RunPaths(run_dir)
        names |= _named_by(paths.provenance) | _named_by(paths.finished)
        try:
            names.add(RunFile.load(paths.run_file).dataset_id)
        except (OSError, ValueError, LookupError, TypeError):  # no run.yaml, or not one snakeddp can read
            pass
        for record in paths.kept_records():
            names |= _named_by(record) if _restorable(AttemptPaths(record.parent)) else set()
        for unfinished in paths.kept_unfinished():
            named = _record_of(unfinished.state).get("dataset") if newest_checkpoint(unfinished.folder) else None
            names |= {named} if isinstance(named, str) and named else set()
    return names


def _record_of(path: Path) -> dict[str, Any]:
    try:
        record = read_json(path)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _named_by(path: Path) -> set[str]:
    """The dataset a finished attempt's record names: its data.dataset and its manifest's folder, as names."""
    data = _record_of(path).get("data")
    if not isinstance(data, dict):
        return set()
    manifest = data.get("manifest")
    named = {data.get("dataset"), PurePosixPath(manifest).parent.name if isinstance(manifest, str) else None}
    return {name for name in named if isinstance(name, str) and name}


def _restorable(attempt: AttemptPaths) -> bool:
    """Whether any checkpoint an earlier attempt's record lists is still there (a pruned one's are all gone)."""
    listed = listed_checkpoints(_record_of(attempt.provenance))
    return any((path := inside(attempt.folder, entry["path"])) is not None and path.is_file() for entry in listed)


def folders(results: Path) -> list[Path]:
    """Every dataset folder under results/data/ (a link is no folder of the workflow's: it is left alone)."""
    data = Path(results) / DATA
    if not data.is_dir():
        return []
    return sorted(
        path for path in data.iterdir() if path.is_dir() and not path.is_symlink() and DATASET_ID.fullmatch(path.name)
    )


def plan(results: Path, planned: Iterable[str]) -> tuple[list[Dataset], list[Path]]:
    """The dataset folders pruning removes (neither planned nor needed: ``needed``) and those it keeps."""
    keep = set(planned) | needed(results)
    found = folders(results)
    return [Dataset(path, tree_size(path)) for path in found if path.name not in keep], [
        path for path in found if path.name in keep
    ]


def prune(results: Path, planned: Iterable[str], dry_run: bool, command: str) -> tuple[list[Dataset], list[Path]]:
    """Remove what ``plan`` names (nothing with ``dry_run``) and return it with the folders kept. The record is
    written first, every folder in it, so a removal cut short is told from a loss too."""
    removed, kept = plan(results, planned)
    if dry_run or not removed:
        return removed, kept
    path = record_path(results)
    at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    # An entry whose folder is back (the dataset made again) says nothing any more.
    entries = [entry for entry in read_record(path) if not (path.parent / entry["name"]).exists()]
    entries += [_entry(dataset, at, command) for dataset in removed]
    atomic_write_json(path, {"format": FORMAT, "datasets": entries})
    for dataset in removed:
        shutil.rmtree(dataset.path)
    return removed, kept


def _entry(dataset: Dataset, at: str, command: str) -> dict[str, Any]:
    manifests = sorted({path for pattern in MANIFESTS for path in dataset.path.glob(pattern) if path.is_file()})
    return {
        "name": dataset.name,
        "manifests": [{"file": path.name, "sha256": sha256_file(path)} for path in manifests],
        "bytes": dataset.size,
        "pruned_at": at,
        "command": command,
    }
