"""Ingest a CSV or Parquet table (or a folder of images in class folders) into the same partition files and
manifest as synthetic data.

One streaming pass reads the table in chunks of rows (files in name order: snakeddp.data.source, read by
snakeddp.data.readers), checks every value, and deals each row to validation or one of the P train
partitions by a seeded hash of its row number (snakeddp.data.split), so the split does not depend on chunk
sizes, file boundaries or the machine. Each feature column is encoded as its type says (snakeddp.data.layout
and columns: numbers, arrays, one-hot categories, images decoded once). Where every partition's size is known
before reading (a Parquet or Delta table's footers count its rows), rows are written straight into their
partition files (snakeddp.data.inplace); otherwise they go through one spill file (snakeddp.data.spill).
A Parquet or Delta table of at least one window's rows is read window by window instead (its row groups in a
seeded order: snakeddp.data.split.windows), each train partition published as soon as its last window is read
(snakeddp.data.windowed). Memory stays at about one chunk of rows (for Parquet, one row group), whatever the
table's size.

A sample's id is its row number in the table (0-based, counting across files in name order), so
every trained sample traces back to its source row.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from snakeddp.config import parts
from snakeddp.data import columns as cols
from snakeddp.data import delta, imagefolder, readers, remote, split
from snakeddp.data import names as data_names
from snakeddp.data.identity import Check, fingerprint
from snakeddp.data.inplace import InPlace
from snakeddp.data.layout import chunk_rows as rows_per_chunk
from snakeddp.data.layout import kept_in, layout_of, probe_rows
from snakeddp.data.source import IMAGES, Source, TableFile, delta_snapshot, features_of, open_source
from snakeddp.data.spill import Spill
from snakeddp.data.split import Window, assign, check_empty, deal, known_counts, window_counts, windows_of
from snakeddp.data.windowed import Published, ids_of
from snakeddp.errors import TableError
from snakeddp.util.fsutil import atomic_write_json, read_json, stat_stamp
from snakeddp.util.terminal import say

GENERATOR = "snakeddp.table/1"
# In an ingestion's folder: each partition's stat stamp once it was complete and hashed (``hand_over_written``).
WRITTEN = "written.json"
# Seconds between progress lines while a big table is read.
PROGRESS_EVERY_S = 10


@dataclass
class Stats:
    """What one ingestion read: per file its rows, and rows dropped by nan_policy=drop."""

    files: list[dict[str, Any]] = field(default_factory=list)
    rows_read: int = 0
    rows_dropped: int = 0
    seen: int = 0
    """Rows handed on so far (the progress lines)."""
    said: float = field(default_factory=time.monotonic)
    """When the last progress line was said."""


def check_labels(labels: np.ndarray, rows: np.ndarray, classes: int, path: Path | str, column: str) -> None:
    """Labels must be 0/1 (binary) or class indices; ``rows`` are their row indices in the file (in any order:
    the first bad one in the file is named)."""
    if classes == 1:
        bad = np.flatnonzero((labels != 0) & (labels != 1))
        rule = "0 or 1 (data.num_classes is 1: binary labels)"
    else:
        bad = np.flatnonzero((labels != np.floor(labels)) | (labels < 0) | (labels >= classes))
        rule = f"an integer in 0..{classes - 1} (data.num_classes is {classes})"
    if bad.size:
        first = bad[np.argmin(rows[bad])]
        raise TableError(
            f"{readers.where(path, column, int(rows[first]))}: label {labels[first]:g} is not {rule}. "
            "HINT: fix the label column or data.num_classes."
        )


@dataclass(frozen=True)
class Stretch:
    """Rows read one after the other: a whole file, or (a windowed split's) one of its row groups."""

    unit: TableFile
    first_row: int
    """The table row number of its first row (rows count across files in name order)."""
    file_row: int = 0
    """Its first row's index in its file (messages name a file's row)."""
    groups: tuple[int, ...] | None = None
    """A Parquet file's row groups to read; None: the whole unit."""
    window: Window | None = None
    """The window whose span its rows are dealt over; None: the global split."""


def _read_rows(
    source: Source,
    layout: cols.Layout,
    params: Mapping[str, Any],
    sink: Spill | InPlace,
    chunk_rows: int,
    stats: Stats,
    check: Check | None,
) -> None:
    """Every row, read in order, checked, encoded and handed to ``sink`` grouped by target: each chunk's rows
    are sorted by their target (stably: a target's rows stay in row order) before they are encoded, so the
    encoding writes them in the order the sink stores them. ``check``: the table's identity, checked as its
    files are read (a TableError at the end where it is not the one planned)."""
    units = source.units
    for number, unit in enumerate(units, 1):
        say(f"ingest: reading {unit.path} (file {number} of {len(units)})")
        with check.reading(source.paths_of(unit)) if check else contextlib.nullcontext():
            rows = _read_unit(source, Stretch(unit, stats.rows_read), layout, params, sink, chunk_rows, stats)
        if rows == 0:
            raise TableError(f"{unit.path}: the file has no rows. HINT: remove it from the table or fill it.")
        stats.files.append({"file": str(unit.path), "rows": rows})
        stats.rows_read += rows
    _checked(check)


def _checked(check: Check | None) -> None:
    """The table read is the one planned (a TableError otherwise), said in one line."""
    if check is not None:
        check.finish()
        planned = len(check.entries) - check.hashed_again
        say(
            f"ingest: the table is the one planned ({planned} of {len(check.entries)} files as the plan hashed them, "
            f"{check.hashed_again} hashed again while read)"
        )


def _read_windows(
    source: Source,
    found: list[Window],
    layout: cols.Layout,
    params: Mapping[str, Any],
    sink: Published,
    chunk_rows: int,
    stats: Stats,
    check: Check | None,
) -> None:
    """A windowed split's rows, window by window, each window's row groups in its (seeded) order; a train
    partition is published as the last window that feeds it is read. ``check``: as ``_read_rows``, over the
    whole read (a file's row groups are read in several windows)."""
    files = source.files
    sizes = [source.footer(file).num_rows for file in files]
    for file, size in zip(files, sizes, strict=True):
        if size == 0:
            raise TableError(f"{file.path}: the file has no rows. HINT: remove it from the table or fill it.")
    file_first = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    with check.reading([file.path for file in files]) if check else contextlib.nullcontext():
        for window in found:
            say(
                f"ingest: window {window.index + 1} of {len(found)} ({window.rows:,} rows in {len(window.groups)} row "
                f"groups, train partitions {window.span.start}-{window.span.stop - 1})"
            )
            sink.begin(window)
            for group in window.groups:
                where = Stretch(
                    files[group.file], group.first_row, group.first_row - file_first[group.file], (group.group,), window
                )
                _read_unit(source, where, layout, params, sink, chunk_rows, stats)
            sink.end(window)
    stats.files = [{"file": str(file.path), "rows": size} for file, size in zip(files, sizes, strict=True)]
    stats.rows_read = sum(sizes)
    _checked(check)


def _read_unit(
    source: Source,
    stretch: Stretch,
    layout: cols.Layout,
    params: Mapping[str, Any],
    sink: Spill | InPlace | Published,
    chunk_rows: int,
    stats: Stats,
) -> int:
    """A stretch's rows, each chunk dealt and handed to ``sink``; the number of rows read."""
    table, unit, window = source.table, stretch.unit, stretch.window
    features, label = [c.name for c in layout.columns], table.label
    partitions, classes = params["num_train_files"], params["num_classes"]
    row, file_rows, path = stretch.first_row, stretch.file_row, unit.path
    where_of = source.where(unit)
    for chunk in source.chunks(
        unit,
        [*features, label],
        chunk_rows,
        [c.name for c in layout.columns if c.kind == cols.CATEGORY],
        stretch.groups,
    ):
        if time.monotonic() - stats.said >= PROGRESS_EVERY_S:
            say(f"ingest: {stats.seen:,} rows read")
            stats.said = time.monotonic()
        n = len(chunk[label])
        labels = cols.numbers(chunk[label], where_of, label, file_rows, label=True)
        numbers = np.arange(row, row + n, dtype=np.int64)
        if window is None:
            targets = assign(numbers, params["seed"], table.val_fraction, partitions)
        else:
            targets = deal(window, numbers, params["seed"], table.val_fraction, partitions)
        order = np.argsort(targets, kind="stable")
        values, usable = layout.encode(chunk, n, where_of, file_rows, order)
        finite = usable & np.isfinite(labels[order])
        if not finite.all():
            if table.nan_policy == "error":
                at = int(np.flatnonzero(~finite)[np.argmin(order[~finite])])
                column = layout.first_bad(values[at]) if not usable[at] else label
                raise TableError(
                    f"{where_of(column, file_rows + int(order[at]))}: missing or non-finite value. "
                    "HINT: clean the table, or set data.table.nan_policy: drop to skip such rows."
                )
            stats.rows_dropped += int((~finite).sum())
        keep = order[finite]  # row indices, grouped by target and in row order within each
        check_labels(labels[keep], file_rows + keep, classes, path, label)
        kept = values if keep.size == n else values[finite]
        if layout.image is not None:
            layout.add_image_stats(kept[targets[keep] < partitions])
        sink.add(row + keep, labels[keep], kept, targets[keep])
        row, file_rows, stats.seen = row + n, file_rows + n, stats.seen + n
    return row - stretch.first_row


def _check_classes(source: Source, classes: int) -> list[str] | None:
    """A folder of images' class names, which data.num_classes must count."""
    if source.fmt != IMAGES:
        return None
    names = imagefolder.classes(source.root)
    if len(names) != classes and not (classes == 1 and len(names) == 2):
        raise TableError(
            f"data.table.path={str(source.table.path)!r}: {len(names)} class folders ({', '.join(names[:10])}"
            f"{', ...' if len(names) > 10 else ''}), and data.num_classes is {classes}. HINT: set data.num_classes: "
            f"{len(names)}."
        )
    return names


def ingest(params: Mapping[str, Any], out_dir: str | Path, chunk_rows: int | None = None) -> dict[str, Any]:
    """Read the table in ``params["table"]`` and write ``train/part-NNNNN.safetensors`` (+ .json
    entries), ``val.safetensors`` (+ val.json) and ``ingest.json`` under ``out_dir``.

    ``params`` are the dataset's identity parameters (``sources.identity``). Returns the summary
    also written to ingest.json; the dataset's task (its feature layout) is also in val.json's entry.
    """
    # The one place the table's settings enter ingestion as a dict: every module below reads the typed part.
    table = parts.Table.of(params["table"])
    snapshot = delta_snapshot(table)
    check = identity_check(table, snapshot)
    try:
        return _ingest(params, open_source(table, snapshot), Path(out_dir), chunk_rows, check)
    finally:
        if check is not None:
            check.close()


def identity_check(table: parts.Table, snapshot: delta.Snapshot | None) -> Check | None:
    """Where the table is the one planned (``data.table.sha256``) is checked: a Delta version's and a table in
    object storage's identity now (their log and listing: no bytes read); a local table's while it is read."""
    expected = table.sha256
    if not expected:
        return None
    if snapshot is None and not remote.is_url(table.path):
        return Check(table.path, expected)
    current = snapshot.identity() if snapshot is not None else fingerprint(table.path, table.format)
    if current != expected:
        raise TableError(
            f"{table.path}: the table's checksum differs from data.table.sha256 (the table changed). "
            "HINT: restore the table, or clear data.table.sha256 to ingest the new one as a new dataset."
        )
    return None


def _ingest(
    params: Mapping[str, Any],
    source: Source,
    out: Path,
    chunk_rows: int | None,
    check: Check | None,
) -> dict[str, Any]:
    table, snapshot = source.table, source.snapshot
    features = features_of(table, source)
    if snapshot is not None:
        delta.require_columns(table.path, snapshot, [*features, table.label])
    partitions, classes = params["num_train_files"], params["num_classes"]
    class_names = _check_classes(source, classes)
    # The pass over category and array columns, or the one the stream manifest's job kept of this table (data.stream).
    kept = kept_in(out, params, source)
    layout = layout_of(source, features, params.get("image") or {}, chunk_rows or probe_rows(features), kept=kept)
    rows = chunk_rows or rows_per_chunk(source, layout)
    (out / data_names.TRAIN).mkdir(parents=True, exist_ok=True)
    metadata = [partition_metadata(t, partitions) for t in range(partitions + 1)]
    targets = data_names.targets(partitions)
    paths = [out / f"{name}.safetensors" for name in targets]
    # Images are written through the spill: their shape may be known only once the first one is decoded.
    found = windows_of(source, params["seed"], partitions) if layout.image is None else None
    counts = known_counts(source, params) if layout.image is None and found is None else None
    stats = Stats()
    if found is not None:
        entries = _windowed(source, found, layout, params, paths, metadata, rows, stats, check)
    elif counts is not None:
        check_empty(table, [t for t in range(partitions + 1) if counts[t] == 0], int(counts.sum()), partitions)
        ids = global_ids(counts, params["seed"], table.val_fraction, partitions)
        # Validation's partial file in train/ too: a directory output, which Snakemake removes with a killed job's.
        placed = InPlace(
            paths, counts, metadata, layout.feature_spec(), binary=classes == 1, ids=ids, scratch=out / data_names.TRAIN
        )
        try:
            _read_rows(source, layout, params, placed, rows, stats, check)
        except BaseException:
            placed.abandon()
            raise
        say(f"ingest: {stats.rows_read:,} rows read into {partitions} train partitions and validation")
        entries = placed.finish()
    else:
        entries = _through_spill(source, layout, params, out, rows, stats, targets, check)
    task = {**task_of(params, layout), **({"classes": class_names} if class_names else {})}
    for name, entry in zip(targets, entries, strict=True):
        atomic_write_json(out / f"{name}.json", {**entry, "task": task} if name == "val" else entry)
    # This machine's stat stamps of the files hashed (place): apart from the entries, which two ingestions share.
    atomic_write_json(out / WRITTEN, {name: stat_stamp(out / f"{name}.safetensors") for name in targets})
    summary = {
        "generator": GENERATOR,
        "format": source.fmt,
        "files": stats.files,
        "rows_read": stats.rows_read,
        "rows_dropped": stats.rows_dropped,
        # Which split dealt the rows (snakeddp.data.split): the windowed one's windows, else the global one.
        "split": {"windows": len(found), "window_rows": split.WINDOW_ROWS} if found else "global",
        "records": {"train": sum(e["records"] for e in entries[:-1]), "val": entries[-1]["records"]},
        "task": task,
    }
    if snapshot is not None:
        summary["delta"] = {"table_id": snapshot.table_id, "version": snapshot.version}
    atomic_write_json(out / "ingest.json", summary)
    return summary


def _windowed(
    source: Source,
    found: list[Window],
    layout: cols.Layout,
    params: Mapping[str, Any],
    paths: list[Path],
    metadata: list[dict[str, str]],
    rows: int,
    stats: Stats,
    check: Check | None,
) -> list[dict[str, Any]]:
    """A windowed split's partitions, each published as it is complete (snakeddp.data.windowed); their entries."""
    partitions = params["num_train_files"]
    counts = window_counts(found, params["seed"], source.table.val_fraction, partitions)
    check_empty(source.table, [t for t in range(partitions + 1) if counts[t] == 0], int(counts.sum()), partitions)
    ids = ids_of(found, params["seed"], source.table.val_fraction, partitions)
    sink = Published(paths, counts, metadata, layout.feature_spec(), binary=params["num_classes"] == 1, ids=ids)
    try:
        _read_windows(source, found, layout, params, sink, rows, stats, check)
        entries = sink.finish()
    except BaseException:
        sink.abandon()
        raise
    say(
        f"ingest: {stats.rows_read:,} rows read in {len(found)} windows into {partitions} train partitions "
        "and validation"
    )
    return entries


def global_ids(counts: np.ndarray, seed: int, val_fraction: float, partitions: int) -> list[np.ndarray]:
    """Each target's ids under the global split, known before reading as its row count is: the row numbers ``assign``
    deals to it, in order. A table split globally in place has fewer rows than one window (2^18: 2 MB of ids)."""
    rows = np.arange(int(counts.sum()), dtype=np.int64)
    dealt = rows[np.argsort(assign(rows, seed, val_fraction, partitions), kind="stable")]
    return np.split(dealt, np.cumsum(counts)[:-1])


def partition_metadata(target: int, partitions: int) -> dict[str, str]:
    """The safetensors metadata of train partition ``target`` (or, at ``partitions``, the validation set)."""
    split = "val" if target == partitions else "train"
    return {"generator": GENERATOR, "split": split, "index": str(0 if split == "val" else target)}


def _through_spill(
    source: Source,
    layout: cols.Layout,
    params: Mapping[str, Any],
    out: Path,
    rows: int,
    stats: Stats,
    names: list[str],
    check: Check | None,
) -> list[dict[str, Any]]:
    """The rows through one spill file, then each partition written from its segments."""
    partitions = params["num_train_files"]
    # Inside train/ (the rule's directory output), so an ingestion killed here leaves it where Snakemake removes it.
    spill = Spill(out / data_names.TRAIN / ".spill", partitions + 1, binary=params["num_classes"] == 1)
    try:
        _read_rows(source, layout, params, spill, rows, stats, check)
        spill.finish()
        empty = [t for t in range(partitions + 1) if spill.count(t) == 0]
        check_empty(source.table, empty, stats.rows_read - stats.rows_dropped, partitions)
        say(f"ingest: {stats.rows_read:,} rows read; writing {partitions} train partitions and validation")
        return [
            spill.write_partition(target, out / f"{name}.safetensors", partition_metadata(target, partitions), rows)
            for target, name in enumerate(names)
        ]
    finally:
        spill.finish()
        spill.path.unlink(missing_ok=True)


def task_of(params: Mapping[str, Any], layout: cols.Layout) -> dict[str, Any]:
    """The dataset's task: its labels, and its features as ingestion laid them out."""
    classes = params["num_classes"]
    return {"num_classes": classes, "kind": "binary" if classes == 1 else "multiclass", **layout.task_fields()}


def hand_over_written(folder: str | Path) -> None:
    """Hand each file an ingestion wrote in ``folder`` (the dataset's) over to training on this machine
    (partitions.hand_over) where it is still the file hashed: its stat stamp the one recorded once it was complete
    and hashed (``WRITTEN``, which then goes). A file changed since is hashed by its reader, as any other."""
    from snakeddp.data.partitions import hand_over

    folder = Path(folder)
    try:
        written = read_json(folder / WRITTEN)
    except (OSError, ValueError):
        return
    for name, stamp in written.items():
        path = folder / f"{name}.safetensors"
        try:
            if stat_stamp(path) == stamp:
                hand_over(path, read_json(folder / f"{name}.json"))
        except (OSError, ValueError):
            continue  # not there, or its entry unreadable: its reader hashes it
    (folder / WRITTEN).unlink()
