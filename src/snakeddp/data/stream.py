"""Training beside ingestion: a windowed table's runs start on partition 0 while later ones are still written.

A table split by windows (snakeddp.data.split) publishes each train partition as soon as it is complete, its
entry written last (snakeddp.data.windowed). Such a dataset's runs take a stream manifest (``stream-P.json``)
instead of the manifest: what the footers and the schema say before any row is read (the task, the rows of
every partition, where the entries will be), no checksum. Its rule is quick, so a run starts beside ingestion.

The DataModule waits for each partition's entry (``Stream``) at its final path, where ingestion publishes it
(rule data_table writes the dataset's files itself); an entry that exists names a complete file. Once a run has
read every partition's entry and validation's, the manifest they make (``manifest-P.json``, byte for byte the one
data_manifest writes) is its data's identity (``Stream.completed``): provenance, the report and ``snakeddp verify``
use it.

Every other dataset (fewer rows than a window, CSV, ``nan_policy: drop``, images, a table in object storage)
keeps training after the manifest.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.data import names as data_names
from snakeddp.errors import DataIntegrityError, print_line
from snakeddp.util.fsutil import atomic_write_json, read_json

STREAM_FORMAT = "snakeddp.stream/1"
#: Where a run trains on the file system its ingestion writes: the others' train jobs read what was staged for them
#: (AzureML, Databricks), or are not tested beside a running ingestion yet (Slurm, Spark).
PLATFORMS = ("local",)
#: Seconds a run waits for a partition while nothing in the dataset's train/ changes (nor has it appeared).
STALL_S = 300.0
POLL_S = 0.1


def streams(params: Mapping[str, Any]) -> bool:
    """Whether a dataset (its identity parameters) trains beside its ingestion: a local Parquet table or Delta
    version split by windows. Asked when the workflow plans; reads the files' footers, once per dataset."""
    return _streams(json.dumps(params, sort_keys=True))


@functools.cache
def _streams(params_json: str) -> bool:
    params = json.loads(params_json)
    if params.get("source") != "table" or params.get("image"):
        return False
    from snakeddp.config import parts
    from snakeddp.data.remote import is_url
    from snakeddp.data.source import delta_snapshot, open_source
    from snakeddp.data.split import windows_of
    from snakeddp.errors import TableError

    table = parts.Table.of(params["table"])
    if is_url(table.path):
        return False
    try:
        source = open_source(table, delta_snapshot(table))
        return windows_of(source, params["seed"], params["num_train_files"]) is not None
    except (TableError, OSError):
        return False  # the ingestion names what is wrong


def write_stream_manifest(path: str | Path, dataset: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The stream manifest of a windowed table: its task and each target's rows, from footers and schema."""
    from snakeddp.config import parts
    from snakeddp.data.layout import kept_in, layout_of, probe_rows
    from snakeddp.data.source import delta_snapshot, features_of, open_source
    from snakeddp.data.split import window_counts, windows_of
    from snakeddp.data.table import task_of

    table = parts.Table.of(params["table"])
    source = open_source(table, delta_snapshot(table))
    partitions = params["num_train_files"]
    found = windows_of(source, params["seed"], partitions)
    if found is None:
        raise DataIntegrityError(f"{table.path}: not split by windows, so its runs cannot train beside ingestion")
    features = features_of(table, source)
    # The same pass as ingestion's, beside it: made by whichever of the two comes first, kept in the dataset's folder
    # for the other, and said in this job's log, not a second time on the terminal.
    kept = kept_in(Path(path).parent, params, source)
    layout = layout_of(source, features, params.get("image") or {}, probe_rows(features), print_line, kept)
    counts = [int(n) for n in window_counts(found, params["seed"], table.val_fraction, partitions)]
    stream = {
        "format": STREAM_FORMAT,
        "dataset": dataset,
        "params": dict(params),
        "task": task_of(params, layout),
        "partitions": partitions,
        "counts": counts,
        "records": {"train": sum(counts[:-1]), "val": counts[-1]},
        "manifest": f"manifest-{partitions}.json",
    }
    atomic_write_json(path, stream)
    return stream


def is_stream(manifest: Mapping[str, Any]) -> bool:
    return manifest.get("format") == STREAM_FORMAT


class Closed(Exception):
    """A wait that ``Stream.close`` ended: its run is over, so it is never shown."""


class Stream:
    """The entries of a stream manifest's partitions, each waited for until its file is complete.

    ``stream[k]`` is train partition k's entry with ``file`` relative to the dataset's folder; ``val()``
    validation's. Thread-safe: the prefetcher asks on its own thread."""

    def __init__(self, root: Path, manifest: Mapping[str, Any]) -> None:
        self.root, self.manifest = root, manifest
        self.train = root / data_names.TRAIN  # the ingestion's directory output: there while it runs or once it ran
        self.found: dict[str, dict[str, Any]] = {}  # by name (train/part-00000, val): the entry as its writer wrote it
        self._closed = threading.Event()

    def close(self) -> None:
        """End any wait (the run is over: a prefetch of a partition it will not train must not hold its exit)."""
        self._closed.set()

    def __len__(self) -> int:
        return int(self.manifest["partitions"])

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._entry(data_names.train_partition(index), f"{data_names.TRAIN}/")

    def val(self) -> dict[str, Any]:
        return self._entry(data_names.VALIDATION, "")

    def _entry(self, name: str, folder: str, closable: bool = True) -> dict[str, Any]:
        entry = self._wait(name, closable)
        self.found[name] = entry
        return {**entry, "file": f"{folder}{entry['file']}"}

    def _wait(self, name: str, closable: bool) -> dict[str, Any]:
        """The entry, once ingestion has published it."""
        seen, last, since = False, None, time.monotonic()
        while True:
            try:
                return read_json(self.root / f"{name}.json")
            except (OSError, ValueError):
                pass  # not there (yet), or removed as it was read (a failed ingestion's): asked again
            state = _progress(self.train)
            seen = seen or state is not None
            if self._ingestion_failed():
                self._stopped(name, "its ingestion failed (the data_table job above)")
            # Snakemake removes a failed job's directory output: the train/ folder seen, then gone.
            if seen and state is None and not (self.root / f"{name}.json").exists():
                self._stopped(name, "its ingestion stopped before it was published")
            if state != last:
                last, since = state, time.monotonic()
            elif time.monotonic() - since > STALL_S:
                if not seen:
                    self._not_ingested(name)
                self._stopped(name, f"nothing was ingested for {STALL_S:.0f} s")
            if not closable:
                time.sleep(POLL_S)
            elif self._closed.wait(POLL_S):
                raise Closed(name)

    def _ingestion_failed(self) -> bool:
        """Whether the table's ingestion failed in this run's own invocation (its record, ``INGEST_FAILED``): an
        error it said in a second, which the run waited out for STALL_S where it came before train/ appeared."""
        invocation = os.environ.get(data_names.INVOCATION)
        failed = self.root / data_names.INGEST_FAILED
        if not invocation or not failed.is_file():
            return False
        try:
            return read_json(failed).get("invocation") == invocation
        except (OSError, ValueError, AttributeError):
            return False

    def _stopped(self, name: str, why: str) -> None:
        log = f"logs/data/{self.manifest['dataset']}/ingest.log"
        raise DataIntegrityError(
            f"{self.root / name}.safetensors: {why}. HINT: {log} says why (the data_table job); fix that, then "
            "rerun the workflow: it ingests the table again and the run resumes."
        )

    def _not_ingested(self, name: str) -> None:
        manifest = self.root / self.manifest["manifest"]
        raise DataIntegrityError(
            f"{self.root / name}.safetensors: no ingestion of the table began within {STALL_S:.0f} s (the run "
            f"starts beside it, and the targets asked did not include it). HINT: ask for {manifest} with the run, "
            "or for the report (snakemake with no target)."
        )

    def completed(self) -> tuple[Path, str, dict[str, Any]]:
        """The dataset's manifest (its path, the sha256 of the bytes data_manifest writes, and its content), from
        every partition's and validation's entry, waited for."""
        from snakeddp.data.partitions import manifest_of

        for index in range(len(self)):
            self._entry(data_names.train_partition(index), f"{data_names.TRAIN}/", closable=False)
        self._entry(data_names.VALIDATION, "", closable=False)
        train = [self.found[data_names.train_partition(i)] for i in range(len(self))]
        val = dict(self.found[data_names.VALIDATION])
        params = {**self.manifest["params"], "num_train_files": len(train)}
        task = val.pop("task", None) or self.manifest["task"]
        manifest = manifest_of(self.manifest["dataset"], params, train, val, task)
        text = json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False) + "\n"  # as atomic_write_json
        return self.root / self.manifest["manifest"], hashlib.sha256(text.encode()).hexdigest(), manifest


def _progress(train: Path) -> tuple[int, ...] | None:
    """What changes while an ingestion writes (its files' sizes and times); None where its train/ is not."""
    try:
        with os.scandir(train) as found:
            entries = list(found)
    except FileNotFoundError:
        return None
    sizes = []
    for entry in entries:
        try:
            stat = entry.stat()
        except FileNotFoundError:
            continue  # renamed to its final name, or a temporary entry replaced, meanwhile
        sizes.append(stat.st_size + stat.st_mtime_ns)
    return tuple(sorted(sizes))


def train_input(dataset: str, params: Mapping[str, Any], partitions: int, platform: str) -> str:
    """What a table run's train job takes: the stream manifest where its dataset streams, else the manifest."""
    name = "stream" if platform in PLATFORMS and streams(params) else "manifest"
    return f"results/data/{dataset}/{name}-{partitions}.json"


def manifest_of_stream(path: str) -> str | None:
    """The manifest a stream manifest's runs complete (``stream-P.json`` -> ``manifest-P.json``), else None."""
    folder, _, name = path.rpartition("/")
    return f"{folder}/manifest-{name.removeprefix('stream-')}" if name.startswith("stream-") else None
