"""A table's feature columns as its partitions store them (snakeddp.data.columns' ``Layout``): each column's
kind from the files' types, the vocabularies of its category columns and the widths of its list columns
from one pass over them, and how many rows ingestion reads at a time.

A table trained beside its ingestion has two jobs that need the layout at once, the stream manifest's and
ingestion's (snakeddp.data.stream). The pass is made once: the first job to take the dataset folder's lock makes
it and keeps its result beside the dataset (``KEPT``, JSON under the table's identity), the other waits for the
lock and reads it, and makes the pass itself when what it finds is not for the same table and columns.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snakeddp.data import columns as cols
from snakeddp.data import imagefolder, images, remote
from snakeddp.data.source import IMAGES, Source
from snakeddp.errors import TableError
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.hashing import sha256_json
from snakeddp.util.terminal import say

# About 16 MB of float64 values per chunk: big enough to parse fast, small enough to never matter.
CHUNK_VALUES = 1 << 21
# Rows per chunk of a table of images: their encoded bytes and decoded pixels are what a chunk holds.
IMAGE_CHUNK_ROWS = 256
# The pass's result kept in the dataset's folder, and the lock the jobs that need it take in turn.
KEPT, KEPT_LOCK, KEPT_FORMAT = ".vocabularies.json", ".vocabularies.lock", "snakeddp.vocabularies/1"


@dataclass(frozen=True)
class Kept:
    """Where the pass over a dataset's category and array columns is kept, and what it is kept for: the dataset's
    identity parameters and the table's snapshot (a Delta version's identity, or each local file's size and
    modification time), which the scanned columns complete."""

    folder: Path
    params: Mapping[str, Any]
    source: Source

    @functools.cached_property
    def identity(self) -> str | None:
        """Read when there is a pass to share: a table without category or array columns needs no look at each of
        its files (a stat each, slow on a cluster's file system). None for parameters that are not JSON (a
        caller's own): nothing to key the result by."""
        if self.source.snapshot is not None:
            snapshot: Any = self.source.snapshot.identity()
        else:
            files = self.source.files
            stats = [os.stat(f.path) for f in files]
            snapshot = [[str(f.path), s.st_size, s.st_mtime_ns] for f, s in zip(files, stats, strict=True)]
        try:
            return sha256_json({"params": self.params, "table": snapshot})
        except (TypeError, ValueError):
            return None


def kept_in(folder: str | Path, params: Mapping[str, Any], source: Source) -> Kept | None:
    """What keeps ``source``'s pass in the dataset ``folder`` for the other job of its dataset; None for a table in
    object storage (never trained beside its ingestion) or a folder of images (no pass)."""
    if source.fmt == IMAGES or remote.is_url(source.table.path):
        return None
    return Kept(Path(folder), params, source)


def _kinds(source: Source, features: Sequence[str]) -> dict[str, Any]:
    """Each feature's kind and, for a typed file, its arrow type (from the first file that holds it)."""
    categories = set(source.table.categories)
    if source.fmt == IMAGES:
        return {imagefolder.IMAGE: (cols.IMAGE, None)}
    if source.fmt == "csv":
        return {c: (cols.CATEGORY if c in categories else cols.NUMBER, None) for c in features}
    found: dict[str, Any] = {}
    for file in source.files:
        types = {f.name: f.type for f in source.footer(file).schema.to_arrow_schema()}
        for name in features:
            if name not in found and name in types:
                found[name] = (cols.kind_of(name, types[name], categories, str(file.path)), types[name])
        if len(found) == len(features):
            break
    # Not in any file: a partition column (text in a hive folder's name, typed in a Delta log), or added later.
    return {c: found.get(c) or (_partition_kind(source, c, categories), None) for c in features}


def _partition_kind(source: Source, name: str, categories: set[str]) -> str:
    """The kind of a column held in no data file. A Delta log types its partition values as the table's schema
    declares them: a string column is a category, as it is inside a file. A hive folder's names are text
    whatever was written, so there only data.table.categories makes one."""
    if name in categories:
        return cols.CATEGORY
    if source.snapshot is not None:
        typed = next((f.values[name] for f in source.files if f.values.get(name) is not None), None)
        if isinstance(typed, str):
            return cols.CATEGORY
    return cols.NUMBER


def layout_of(
    source: Source,
    features: Sequence[str],
    image: Mapping[str, Any],
    rows: int,
    announce: Callable[[str], None] = say,
    kept: Kept | None = None,
) -> cols.Layout:
    """The feature columns' layout: kinds from the files' types, then one pass over the category and
    variable-length array columns for their vocabularies and widths, said with ``announce`` (the terminal's
    for ingestion; the stream manifest, which needs the same pass beside it, its log's alone); ``kept``: where
    the pass is shared with the other job of the dataset."""
    kinds = _kinds(source, features)
    columns = [cols.Column(name, kind) for name, (kind, _) in kinds.items()]
    spec = images.ImageSpec.of(image or {})
    found = [c for c in columns if c.kind == cols.IMAGE]
    if found and len(columns) > 1:
        raise TableError(
            f"data.table.features: {found[0].name!r} is an image column, and an image column trains alone (the "
            f"features also name {', '.join(repr(c.name) for c in columns if c is not found[0])}). HINT: set "
            f"data.table.features: [{found[0].name}] (Spark's binaryFile columns path, modificationTime and length "
            "describe the file, not the image)."
        )
    if found and spec.size is not None:
        found[0].shape = (spec.channels, *spec.size)
    # A fixed-size list's width is its type's; a list's and a category's need a look at the rows.
    scanned = []
    for column in columns:
        arrow_type = kinds[column.name][1]
        if column.kind == cols.ARRAY and hasattr(arrow_type, "list_size"):
            column.width = int(arrow_type.list_size)
        elif column.kind in (cols.ARRAY, cols.CATEGORY):
            scanned.append(column)
    if scanned:
        _scan_once(source, scanned, rows, announce, kept)
        # Not for a column data.table.categories names: a category by choice (integer codes).
        for column in scanned:
            chosen = column.name in source.table.categories
            if column.kind == cols.CATEGORY and not chosen and (note := cols.numbers_as_text(column)):
                announce(note)
    return cols.Layout(columns, spec, refuse_images=source.table.nan_policy == "error")


def _scan_once(
    source: Source, scanned: list[cols.Column], rows: int, announce: Callable[[str], None], kept: Kept | None
) -> None:
    """``_scan``, or the result another job of the dataset kept of the same pass over the same table."""
    if kept is None or kept.identity is None:
        _scan(source, scanned, rows, announce)
        return
    identity = sha256_json({"kept": kept.identity, "columns": [[c.name, c.kind] for c in scanned]})
    names = ", ".join(c.name for c in scanned)
    waiting = f"ingest: waiting for the other job of this dataset, which is reading the vocabularies of {names}"
    with _turn(kept.folder / KEPT_LOCK, lambda: announce(waiting)):
        if _reuse(kept.folder / KEPT, identity, scanned, source.table.unseen == "oov"):
            announce(f"ingest: the vocabularies of {names}, as another job read them")
            return
        _scan(source, scanned, rows, announce)
        result = {
            c.name: {
                "kind": c.kind,
                **({"vocabulary": list(c.vocabulary)} if c.kind == cols.CATEGORY else {}),
                "width": c.width - int(c.oov),
            }
            for c in scanned
        }
        with contextlib.suppress(OSError):  # kept only to spare the other job a pass: it makes its own
            atomic_write_json(kept.folder / KEPT, {"format": KEPT_FORMAT, "identity": identity, "columns": result})


@contextlib.contextmanager
def _turn(lock: Path, waiting: Callable[[], None]) -> Iterator[None]:
    """Hold ``lock`` (flock: the kernel lets go however its holder ends), calling ``waiting`` first where another
    job holds it (its pass may take minutes); without it where it cannot be taken (no folder yet, a file system
    without locks), so each job makes its own pass."""
    try:
        handle = open(lock, "ab")
    except OSError:
        handle = None
    with handle or contextlib.nullcontext():
        if handle is not None:
            with contextlib.suppress(OSError):
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    waiting()
                    fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _reuse(path: Path, identity: str, scanned: list[cols.Column], oov: bool) -> bool:
    """Set the scanned columns' vocabularies and widths from the kept result when it is for ``identity`` and
    well formed (JSON read as data, each vocabulary sorted, unique and within a one-hot's size); else False."""
    try:
        kept = read_json(path)
    except (OSError, ValueError):
        return False
    if not isinstance(kept, dict) or kept.get("format") != KEPT_FORMAT or kept.get("identity") != identity:
        return False
    found = kept.get("columns")
    if not isinstance(found, dict) or set(found) != {c.name for c in scanned}:
        return False
    for column in scanned:
        entry = found[column.name]
        if not isinstance(entry, dict) or entry.get("kind") != column.kind:
            return False
        width = entry.get("width")
        if type(width) is not int or width < 1:
            return False
        if column.kind == cols.CATEGORY:
            vocabulary = entry.get("vocabulary")
            if (
                not isinstance(vocabulary, list)
                or not all(isinstance(v, str) for v in vocabulary)
                or vocabulary != sorted(set(vocabulary))
                or not 0 < len(vocabulary) == width <= cols.MAX_CATEGORIES
            ):
                return False
    for column in scanned:
        entry = found[column.name]
        if column.kind == cols.CATEGORY:
            column.vocabulary, column.oov = tuple(entry["vocabulary"]), oov
            column.width = len(column.vocabulary) + int(oov)
        else:
            column.width = entry["width"]
    return True


def _scan(source: Source, scanned: list[cols.Column], rows: int, announce: Callable[[str], None]) -> None:
    """One pass over the category columns (their values, for the vocabulary) and list columns (the length
    of their first row), before the rows are read: a category's one-hot needs its whole vocabulary."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [c.name for c in scanned]
    values: dict[str, set[str]] = {c.name: set() for c in scanned if c.kind == cols.CATEGORY}
    widths: dict[str, int] = {}
    text = [c.name for c in scanned if c.kind == cols.CATEGORY]
    announce(f"ingest: reading the vocabularies of {', '.join(names)}")
    for unit in source.units:
        for chunk in source.chunks(unit, names, rows, text):
            for name in values:
                found = cols.texts(chunk[name])
                values[name].update(v for v in found if v is not None)
            for name in (n for n in names if n not in values and n not in widths):
                lengths = pc.list_value_length(chunk[name]).drop_null() if isinstance(chunk[name], pa.Array) else []
                if len(lengths):
                    widths[name] = int(lengths[0].as_py())
    for column in scanned:
        if column.kind == cols.CATEGORY:
            column.vocabulary = cols.vocabulary(
                values[column.name], column.name, f"data.table.path={str(source.table.path)!r}"
            )
            column.oov = source.table.unseen == "oov"
            column.width = len(column.vocabulary) + int(column.oov)
            if column.width == 0:
                raise TableError(
                    f"data.table.path={str(source.table.path)!r}: category column {column.name!r} has no value in "
                    "any row. HINT: leave it out of the features."
                )
        else:
            column.width = widths.get(column.name, 0)
            if column.width == 0:
                raise TableError(
                    f"data.table.path={str(source.table.path)!r}: array column {column.name!r} has no non-empty "
                    "row, so its width is unknown. HINT: leave it out of the features."
                )


def probe_rows(features: Sequence[str]) -> int:
    """Rows per chunk of the pass that scans category and list columns, before their widths are known."""
    return max(1024, CHUNK_VALUES // (len(features) + 1))


def chunk_rows(source: Source, layout: cols.Layout) -> int:
    """Rows per chunk: images a few hundred at a time; a typed table of numbers in chunks 4x the size of a
    CSV's (no float64 copy of them is made, and per-chunk work on 1,000 columns was a tenth of ingestion)."""
    if layout.image is not None:
        return IMAGE_CHUNK_ROWS
    typed = source.fmt == "parquet" and all(c.kind == cols.NUMBER for c in layout.columns)
    return max(1024, (CHUNK_VALUES * (4 if typed else 1)) // (layout.width + 1))
