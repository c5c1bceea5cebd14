"""Ingest a CSV or Parquet table (or a folder of images in class folders) into the same partition files and
manifest as synthetic data.

One streaming pass reads the table in chunks of rows (files in name order), checks every value,
and deals each row to validation or one of the P train partitions by a seeded hash of its row
number, so the split does not depend on chunk sizes, file boundaries or the machine. Each feature
column is encoded as its type says (snakeddp.data.columns: numbers, arrays, one-hot categories,
images decoded once). Where every partition's size is known before reading (a Parquet or Delta
table's footers count its rows), rows are written straight into their partition files
(snakeddp.data.inplace); otherwise they go to one spill file as fixed-size records, and each
partition is then written from its spill segments into its safetensors layout. Memory stays at
about one chunk of rows (for Parquet, one row group), whatever the table's size.

A sample's id is its row number in the table (0-based, counting across files in name order), so
every trained sample traces back to its source row.

``data.table.path`` may also be an ``az://``, ``abfs://`` or ``s3://`` URL (``snakeddp.data.remote``): its
objects are listed instead of a folder's files, and streamed in blocks as they are read.

A partitioned table keeps a partition column's value out of its data files: in a folder's name (hive
layout, ``region=3/``, as Spark's ``partitionBy`` and pyarrow write it) or in a Delta table's log
(``snakeddp.data.delta``). Such a value is the same for all of a file's rows, so it is added to each
chunk of the file as a column; a column the file holds itself is read from the file.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from snakeddp.data import columns as cols
from snakeddp.data import delta, imagefolder, images, remote
from snakeddp.data.inplace import InPlace
from snakeddp.data.partitions import encode_header
from snakeddp.errors import TableError
from snakeddp.util.fsutil import atomic_write, atomic_write_json, link_or_copy, read_json
from snakeddp.util.hashing import partition_file_checksum, sha256_file, sha256_json
from snakeddp.util.terminal import say

FORMATS = {".csv": "csv", ".csv.gz": "csv", ".parquet": "parquet", ".pq": "parquet"}
GENERATOR = "snakeddp.table/1"
# About 16 MB of float64 values per chunk: big enough to parse fast, small enough to never matter.
CHUNK_VALUES = 1 << 21
# Rows per chunk of a table of images: their encoded bytes and decoded pixels are what a chunk holds.
IMAGE_CHUNK_ROWS = 256
# A Parquet row group up to this size (uncompressed) is decoded whole; a bigger one batch by batch.
WHOLE_GROUP_BYTES = 256 << 20
IMAGES = "images"
# Seconds between progress lines while a big table is read.
PROGRESS_EVERY_S = 10
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# A URL's listing as remote.list_objects gives it: its objects, and whether the URL names one object.
Listing = tuple[list[dict[str, Any]], bool]
# Given a file's column names: the value of each wanted column it lacks, the same for all its rows.
Constants = Callable[[list[str]], dict[str, Any]]


@dataclass(frozen=True)
class TableFile:
    """One file of a table, with the values that its path or the Delta log give all its rows."""

    path: Path | str
    values: Mapping[str, Any] = field(default_factory=dict)
    """Partition column -> value (None: null), used where the file lacks the column."""


def _format_of(path: Path | str) -> str | None:
    name = str(path).rpartition("/")[2].lower()
    return next((fmt for ext, fmt in FORMATS.items() if name.endswith(ext)), None)


def _one_format(where: str, names: Sequence[str], fmt: str) -> str:
    formats = {f for f in map(_format_of, names) if f} if fmt == "auto" else {fmt}
    if len(formats) != 1:
        raise TableError(
            f"{where}: expected CSV or Parquet files of one format, found {sorted(formats) or 'none'}. "
            "HINT: keep one format per folder, or set data.table.format."
        )
    return formats.pop()


def remote_table(url: str, fmt: str = "auto", listed: Listing | None = None) -> tuple[str, list[dict[str, Any]]]:
    """The format and the objects (url, name, size, etag) of a table in object storage; ``listed``: the
    URL's listing (remote.list_objects) when the caller has taken it already."""
    objects, single = listed or remote.list_objects(url)
    if single:  # as a local file: its format by name unless data.table.format says
        found = _format_of(objects[0]["name"]) if fmt == "auto" else fmt
        if found is None:
            raise TableError(f"{url}: cannot tell the table format from the name. HINT: set data.table.format.")
        return found, objects
    chosen = _one_format(url, [o["name"] for o in objects], fmt)
    return chosen, [o for o in objects if _format_of(o["name"]) == chosen]


def _listed(path: str | Path, fmt: str) -> tuple[str, list[tuple[Any, str]]]:
    """The format, and each file of the table (a URL's objects: their URLs) with its name relative to the table."""
    if remote.is_url(path):
        if fmt == IMAGES:
            raise TableError(
                f"data.table.path={str(path)!r}: a folder of images in class folders is read from a local path. "
                "HINT: copy the folder here, or write the images into a Parquet or Delta table (a binary column)."
            )
        chosen, objects = remote_table(str(path), fmt)
        return chosen, [(o["url"], o["name"]) for o in objects]
    root = Path(path)
    if root.is_file():
        found = _format_of(root) if fmt == "auto" else fmt
        if found is None:
            raise TableError(f"{root}: cannot tell the table format from the name. HINT: set data.table.format.")
        return found, [(root, root.name)]
    if not root.is_dir():
        raise TableError(f"data.table.path={str(root)!r}: no such file or folder (relative to {Path.cwd()}).")
    if fmt == IMAGES or (fmt == "auto" and imagefolder.is_image_folder(root)):
        return IMAGES, [(p, p.relative_to(root).as_posix()) for p in imagefolder.image_files(root)]
    candidates = sorted(
        (p for p in root.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    chosen = _one_format(str(root), [p.name for p in candidates], fmt)
    return chosen, [(p, p.relative_to(root).as_posix()) for p in candidates if _format_of(p) == chosen]


def table_files(path: str | Path, fmt: str = "auto") -> tuple[str, list[Path] | list[str]]:
    """The format and the files of a table: the file itself, or a folder's files of that format in name order
    (for a URL, the objects' URLs).

    Hidden files and names starting with "_" (Spark's _SUCCESS, _metadata) are skipped.
    """
    chosen, files = _listed(path, fmt)
    return chosen, [file for file, _ in files]


def hive_values(name: str) -> dict[str, str | None]:
    """The partition values in the ``key=value`` folders of a file's name relative to its table (hive layout),
    as pyarrow.dataset reads them: unescaped (``%3D`` is "="), and ``__HIVE_DEFAULT_PARTITION__`` a null (None).

    The values stay text: a folder declares no type, so they become numbers as a CSV's cells do.
    """
    keys = dict.fromkeys(folder.partition("=")[0] for folder in name.split("/")[:-1] if folder.find("=") > 0)
    if not keys:
        return {}  # pyarrow.dataset (its own libraries) is imported only for a table with such folders
    import pyarrow as pa
    import pyarrow.dataset as ds

    found = ds.get_partition_keys(ds.HivePartitioning(pa.schema([(k, pa.string()) for k in keys])).parse(name))
    return {key: found.get(key) for key in keys}


def table_sources(path: str | Path, fmt: str = "auto") -> tuple[str, list[TableFile]]:
    """``table_files``, each with the partition values of its folders (``hive_values``)."""
    chosen, files = _listed(path, fmt)
    return chosen, [TableFile(file, hive_values(name)) for file, name in files]


def delta_snapshot(table: Mapping[str, Any], listed: Listing | None = None) -> delta.Snapshot | None:
    """The version of a Delta table that ``table`` (the data.table section) names; None for CSV/Parquet.
    ``listed``: a URL's listing, when the caller has taken it already."""
    path, fmt, version = table["path"], table["format"], table.get("version")
    pinned_id = table.get("table_id")
    if fmt not in ("auto", "delta"):
        found = False
    elif fmt == "delta":
        found = True
    else:
        if remote.is_url(path):
            listed = listed or remote.list_objects(str(path))
        found = delta.is_delta(path, listed[0] if listed else None)
    if not found:
        if version is not None or pinned_id is not None:
            key = "version" if version is not None else "table_id"
            raise TableError(
                f"data.table.{key} is set, and {path} is not a Delta table (no _delta_log/ in it). HINT: remove "
                f"data.table.{key} (it pins a Delta table), or point data.table.path at a Delta table's folder."
            )
        return None
    snapshot = delta.open_snapshot(path, version)
    if pinned_id not in (None, snapshot.table_id):
        raise TableError(
            f"data.table.table_id pins {pinned_id}, but the Delta table at {path} is {snapshot.table_id} "
            "(dropped and created again?). HINT: point data.table.path at the table you pinned, or clear "
            "data.table.table_id to train on this one."
        )
    return snapshot


def fingerprint(path: str | Path, fmt: str = "auto", listed: Listing | None = None) -> str:
    """sha256 over the table's files: each one's name relative to the table, size and sha256 (for a URL,
    each object's name, size and ETag: remote.fingerprint; ``listed``: its listing, if taken already)."""
    if remote.is_url(path):
        return remote.fingerprint(remote_table(str(path), fmt, listed)[1])
    root = Path(path)
    _, files = table_files(root, fmt)
    base = root if root.is_dir() else root.parent
    return sha256_json([[p.relative_to(base).as_posix(), p.stat().st_size, sha256_file(p)] for p in files])


def cached_fingerprint(path: str | Path, fmt: str, cache_file: str | Path, listed: Listing | None = None) -> str:
    """``fingerprint``, reusing the last result while no file's size, mtime or inode changed.

    The workflow computes it each time it starts (on Slurm, once per job), so a large table is
    hashed once, not on every start. A URL's listing is taken afresh each time (it reads no bytes).
    """
    if remote.is_url(path):
        return fingerprint(path, fmt, listed)
    root = Path(path)
    _, files = table_files(root, fmt)
    stamp = sha256_json([[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ino] for p in files])
    cache_path = Path(cache_file)
    try:
        cache = read_json(cache_path)
    except (OSError, ValueError):
        cache = {}
    key = str(root.resolve())
    if cache.get(key, {}).get("stamp") == stamp:
        return cache[key]["sha256"]
    digest = fingerprint(root, fmt)
    cache[key] = {"stamp": stamp, "sha256": digest}
    atomic_write_json(cache_path, cache)
    return digest


@contextlib.contextmanager
def _source(path: Path | str) -> Iterator[Any]:
    """What pandas and pyarrow read: the local path, or a stream of the object (closed afterwards)."""
    if not remote.is_url(path):
        yield path
        return
    with remote.open_object(str(path)) as stream:
        yield stream


def _with_constants(chunk: dict[str, Any], constants: Mapping[str, Any], rows: int) -> dict[str, Any]:
    # Text (a hive folder's value) and null stay Python objects, as a CSV's cells are, for the encoders to read.
    return chunk | {
        name: np.full(rows, value, dtype=object if value is None or isinstance(value, str) else None)
        for name, value in constants.items()
    }


def _csv_chunks(
    path: Path | str, columns: Sequence[str], rows: int, constants_of: Constants, text: Sequence[str] = ()
) -> Iterator[dict[str, Any]]:
    import pandas as pd

    # gzip by the name, as for a local path (a stream has none).
    compression = "gzip" if str(path).lower().endswith(".gz") else "infer"
    with _source(path) as source:
        try:
            header = pd.read_csv(source, nrows=0, compression=compression).columns
        except pd.errors.EmptyDataError:
            raise TableError(f"{path}: the file is empty (no header line). HINT: remove it or fill it.") from None
    constants = constants_of(list(header))
    read = [c for c in columns if c not in constants]
    # Category columns as the text the file holds ("007" stays "007").
    dtype = {c: str for c in text if c in read}
    with _source(path) as source:
        reader = pd.read_csv(
            source, usecols=read, chunksize=rows, low_memory=True, compression=compression, dtype=dtype or None
        )
        for frame in reader:
            yield _with_constants({name: frame[name].to_numpy() for name in read}, constants, len(frame))


def _parquet_chunks(
    path: Path | str, columns: Sequence[str], rows: int, constants_of: Constants, text: Sequence[str] = ()
) -> Iterator[dict[str, Any]]:
    """Chunks of pyarrow arrays (numbers are made numpy by the columns' encoders, other kinds read them as typed)."""
    import pyarrow.parquet as pq

    with _source(path) as source:
        try:
            handle = pq.ParquetFile(source)
        except Exception as exc:
            raise TableError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc}).") from None
        with handle:
            constants = constants_of(handle.schema_arrow.names)
            read = [c for c in columns if c not in constants]
            # One row group at a time: iter_batches over the whole file keeps what it read until the
            # end (peak memory grew with the file); per row group it stays at about one group. A group of
            # at most WHOLE_GROUP_BYTES is decoded in one call, its columns on pyarrow's threads: batch by batch,
            # a 1,000-column table paid pyarrow's per-column cost on every batch (ingestion 3x pyarrow's read).
            for group in range(handle.num_row_groups):
                if handle.metadata.row_group(group).total_byte_size <= WHOLE_GROUP_BYTES:
                    batches = handle.read_row_group(group, columns=read, use_threads=True).to_batches(rows)
                else:
                    batches = handle.iter_batches(batch_size=rows, row_groups=[group], columns=read, use_threads=False)
                for batch in batches:
                    # By position: batch.column(name) looks the name up among all columns, 1,000 x 1,000 times.
                    chunk = dict(zip(batch.schema.names, batch.columns, strict=True))
                    yield _with_constants(chunk, constants, batch.num_rows)


def _parquet_schema(path: Path | str) -> Any:
    """The arrow schema of a Parquet file (its footer only)."""
    import pyarrow.parquet as pq

    with _source(path) as source:
        try:
            return pq.read_schema(source)
        except Exception as exc:
            raise TableError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc}).") from None


def _require_columns(path: Path | str, wanted: Sequence[str], present: list[str]) -> None:
    missing = [c for c in wanted if c not in present]
    if missing:
        raise TableError(
            f"{path}: no column {', '.join(map(repr, missing))} (the file has: {', '.join(map(str, present))}). "
            "HINT: fix data.table.features / data.table.label, or the file's header."
        )


def _constants(
    source: TableFile,
    wanted: Sequence[str],
    table: Mapping[str, Any],
    snapshot: delta.Snapshot | None,
    present: list[str],
) -> dict[str, Any]:
    """The value, the same in all its rows, of each wanted column the file lacks: its partition value (None
    is null), or null where a later Delta commit added the column; a TableError for any other."""
    lacking = [c for c in wanted if c not in present]
    # A Delta table's schema has every wanted column (delta.require_columns): one that a file and its
    # partition values lack was added after the file was written.
    later = [c for c in lacking if c not in source.values] if snapshot is not None else []
    unknown = [c for c in lacking if c not in source.values and c not in later]
    _require_columns(source.path, unknown, list(dict.fromkeys([*present, *source.values])))
    if later and table["nan_policy"] == "error":
        raise delta.added_later(table["path"], snapshot, later[0], source.path)
    return {c: source.values.get(c) for c in lacking}


def where(path: Path | str, column: str, index: int) -> str:
    """'file, column, row' of a value; rows count data rows from 1 (a CSV's line is row + 1)."""
    line = f" (line {index + 2})" if _format_of(path) == "csv" else ""
    return f"{path}: column {column!r}, row {index + 1}{line}"


def _numeric(values: Any, path: Path | str, column: str, first_row: int) -> np.ndarray:
    """float64 values of a column chunk, or a TableError at the first value that is not a number."""
    return cols.numbers(values, functools.partial(where, path), column, first_row)


def _row_keys(rows: np.ndarray, seed: int) -> np.ndarray:
    """A uniform [0, 1) value per row number (splitmix64 of seed and row), the same on every machine."""
    with np.errstate(over="ignore"):
        z = rows.astype(np.uint64) + np.uint64(seed) * _GOLDEN + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def assign(rows: np.ndarray, seed: int, val_fraction: float, partitions: int) -> np.ndarray:
    """Target of each row: 0..partitions-1 for train partitions, ``partitions`` for validation."""
    u = _row_keys(rows, seed)
    train = np.minimum(((u - val_fraction) / (1.0 - val_fraction) * partitions).astype(np.int64), partitions - 1)
    return np.where(u < val_fraction, partitions, train)


@dataclass
class Stats:
    """What one ingestion read: per file its rows, and rows dropped by nan_policy=drop."""

    files: list[dict[str, Any]] = field(default_factory=list)
    rows_read: int = 0
    rows_dropped: int = 0


class _Spill:
    """Rows as fixed-size records in one scratch file, remembered per target as (offset, count) segments."""

    def __init__(self, path: Path, targets: int, binary: bool) -> None:
        self.path, self.binary = path, binary
        # Set by the first records added: an image's shape may be known only once the first one is decoded.
        self.dtype: np.dtype = np.dtype([])
        self.handle = open(path, "wb")  # closed by finish()
        self.segments: list[list[tuple[int, int]]] = [[] for _ in range(targets)]
        self.offset = 0

    def add(self, ids: np.ndarray, labels: np.ndarray, features: np.ndarray, targets: np.ndarray) -> None:
        """One chunk's rows (in row order) with their targets."""
        fields = [("ids", "<i8"), ("labels", "<f4" if self.binary else "<i8")]
        records = np.empty(len(ids), dtype=[*fields, ("features", features.dtype, features.shape[1:])])
        records["ids"], records["labels"], records["features"] = ids, labels, features
        if not self.dtype.names:
            self.dtype = records.dtype
        order = np.argsort(targets, kind="stable")
        records, targets = records[order], targets[order]
        bounds = np.searchsorted(targets, np.arange(len(self.segments) + 1))
        self.handle.write(records.tobytes())
        for target in range(len(self.segments)):
            start, stop = int(bounds[target]), int(bounds[target + 1])
            if stop > start:
                self.segments[target].append((self.offset + start * self.dtype.itemsize, stop - start))
        self.offset += records.nbytes

    def count(self, target: int) -> int:
        return sum(n for _, n in self.segments[target])

    def read(self, target: int, rows: int) -> Iterator[np.ndarray]:
        """The target's records in row order, at most ``rows`` at a time."""
        with open(self.path, "rb") as handle:
            for offset, count in self.segments[target]:
                for start in range(0, count, rows):
                    n = min(rows, count - start)
                    handle.seek(offset + start * self.dtype.itemsize)
                    yield np.frombuffer(handle.read(n * self.dtype.itemsize), dtype=self.dtype)

    def finish(self) -> None:
        self.handle.close()


def _write_partition(spill: _Spill, target: int, path: Path, metadata: Mapping[str, str], rows: int) -> dict[str, Any]:
    """Write one partition's safetensors file from its spill segments; return its manifest entry."""
    n = spill.count(target)
    features = spill.dtype["features"]
    specs = {
        "features": (features.base, (n, *features.shape)),
        "labels": (spill.dtype["labels"], (n, 1) if spill.dtype["labels"] == np.float32 else (n,)),
        "ids": (spill.dtype["ids"], (n,)),
    }
    header, order = encode_header(specs, metadata)
    starts, position = {}, len(header)
    for name in order:
        starts[name] = position
        position += np.dtype(specs[name][0]).itemsize * int(np.prod(specs[name][1], dtype=np.int64))

    def write(handle: Any) -> None:
        handle.write(header)
        handle.truncate(position)
        handle.flush()
        fd, cursor = handle.fileno(), dict(starts)
        for records in spill.read(target, rows):
            for name in order:
                data = np.ascontiguousarray(records[name]).tobytes()
                os.pwrite(fd, data, cursor[name])
                cursor[name] += len(data)

    atomic_write(path, write)
    return {
        "file": path.name,
        **partition_file_checksum(path),
        "bytes": position,
        "records": n,
        "tensors": {name: {"dtype": str(np.dtype(d)), "shape": list(s)} for name, (d, s) in specs.items()},
    }


def _chunks(
    fmt: str, path: Path | str, columns: Sequence[str], rows: int, constants_of: Constants, text: Sequence[str] = ()
) -> Iterator[dict[str, Any]]:
    if not remote.is_url(path) and Path(path).stat().st_size == 0:
        raise TableError(f"{path}: the file is empty (0 bytes). HINT: remove it from the table or fill it.")
    return (_csv_chunks if fmt == "csv" else _parquet_chunks)(path, columns, rows, constants_of, text)


def _check_labels(labels: np.ndarray, rows: np.ndarray, classes: int, path: Path | str, column: str) -> None:
    """Labels must be 0/1 (binary) or class indices; ``rows`` are their row indices in the file."""
    if classes == 1:
        bad = np.flatnonzero((labels != 0) & (labels != 1))
        rule = "0 or 1 (data.num_classes is 1: binary labels)"
    else:
        bad = np.flatnonzero((labels != np.floor(labels)) | (labels < 0) | (labels >= classes))
        rule = f"an integer in 0..{classes - 1} (data.num_classes is {classes})"
    if bad.size:
        raise TableError(
            f"{where(path, column, int(rows[bad[0]]))}: label {labels[bad[0]]:g} is not {rule}. "
            "HINT: fix the label column or data.num_classes."
        )


@dataclass
class Source:
    """What one ingestion reads: the format, its files, the Delta version (if any), and the features resolved."""

    fmt: str
    files: list[TableFile]
    snapshot: delta.Snapshot | None
    table: Mapping[str, Any]
    root: Path | None = None
    """A folder of images: its root (its files are the image files)."""

    def chunks(
        self, source: TableFile, wanted: Sequence[str], rows: int, text: Sequence[str] = ()
    ) -> Iterator[dict[str, Any]]:
        if self.fmt == IMAGES:
            return imagefolder.chunks(self.root, [f.path for f in self.files], rows)
        constants_of = functools.partial(_constants, source, wanted, self.table, self.snapshot)
        return _chunks(self.fmt, source.path, wanted, rows, constants_of, text)

    @property
    def units(self) -> list[TableFile]:
        """What is read one after the other: each file, or the whole folder of images as one."""
        return [TableFile(self.root)] if self.fmt == IMAGES else self.files

    def where(self, unit: TableFile) -> cols.Where:
        if self.fmt == IMAGES:
            return lambda column, row: str(self.files[row].path)
        return functools.partial(where, unit.path)


def open_source(table: Mapping[str, Any], snapshot: delta.Snapshot | None) -> Source:
    """The table's files as ingestion reads them: a Delta version's data files with their partition values, a
    folder of images' files, or a CSV/Parquet file or folder's files with their hive values."""
    if snapshot is not None:
        # The version planned: its data files, read as a Parquet table's, with the partition values of its
        # log; the log is delta-rs's to read.
        paths = delta.data_files(table["path"], snapshot)
        files = [TableFile(p, v) for p, v in zip(paths, snapshot.partition_values, strict=True)]
        return Source("parquet", files, snapshot, table)
    fmt, files = table_sources(table["path"], table["format"])
    return Source(fmt, files, None, table, root=Path(table["path"]) if fmt == IMAGES else None)


def column_names(source: Source) -> list[str]:
    """The table's columns, as the first file (or a Delta version's schema) has them, partition columns included."""
    if source.fmt == IMAGES:
        return list(imagefolder.COLUMNS)
    if source.snapshot is not None:
        return list(source.snapshot.columns)
    if not source.files:
        raise TableError(f"data.table.path={source.table['path']!r}: no data files. HINT: point it at a table.")
    first = source.files[0]
    if source.fmt == "csv":
        import pandas as pd

        with _source(first.path) as stream:
            try:
                header = list(
                    pd.read_csv(
                        stream, nrows=0, compression="gzip" if str(first.path).lower().endswith(".gz") else "infer"
                    ).columns
                )
            except pd.errors.EmptyDataError:
                raise TableError(
                    f"{first.path}: the file is empty (no header line). HINT: remove it or fill it."
                ) from None
    else:
        header = list(_parquet_schema(first.path).names)
    return list(dict.fromkeys([*header, *first.values]))


def features_of(table: Mapping[str, Any], source: Source) -> list[str]:
    """``data.table.features``, or every column but the label narrowed by the pattern and exclusions."""
    if table.get("features"):
        return list(table["features"])
    return cols.resolve_features(table, column_names(source), f"data.table.path={str(table['path'])!r}")


def _kinds(source: Source, features: Sequence[str]) -> dict[str, Any]:
    """Each feature's kind and, for a typed file, its arrow type (from the first file that holds it)."""
    table = source.table
    categories = set(table.get("categories") or ())
    if source.fmt == IMAGES:
        return {imagefolder.IMAGE: (cols.IMAGE, None)}
    if source.fmt == "csv":
        return {c: (cols.CATEGORY if c in categories else cols.NUMBER, None) for c in features}
    found: dict[str, Any] = {}
    for file in source.files:
        types = {f.name: f.type for f in _parquet_schema(file.path)}
        for name in features:
            if name not in found and name in types:
                found[name] = (cols.kind_of(name, types[name], categories, str(file.path)), types[name])
        if len(found) == len(features):
            break
    # Not in any file: a partition column (text in a hive folder's name, typed in a Delta log), or added later.
    return {c: found.get(c) or (cols.CATEGORY if c in categories else cols.NUMBER, None) for c in features}


def layout_of(source: Source, features: Sequence[str], image: Mapping[str, Any], rows: int) -> cols.Layout:
    """The feature columns' layout: kinds from the files' types, then one pass over the category and
    variable-length array columns for their vocabularies and widths."""
    table = source.table
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
        _scan(source, scanned, rows)
    return cols.Layout(columns, spec, refuse_images=table["nan_policy"] == "error")


def _scan(source: Source, scanned: list[cols.Column], rows: int) -> None:
    """One pass over the category columns (their values, for the vocabulary) and list columns (the length
    of their first row), before the rows are read: a category's one-hot needs its whole vocabulary."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [c.name for c in scanned]
    values: dict[str, set[str]] = {c.name: set() for c in scanned if c.kind == cols.CATEGORY}
    widths: dict[str, int] = {}
    text = [c.name for c in scanned if c.kind == cols.CATEGORY]
    say(f"ingest: reading the vocabularies of {', '.join(names)}")
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
                values[column.name], column.name, f"data.table.path={str(source.table['path'])!r}"
            )
            column.oov = source.table.get("unseen") == "oov"
            column.width = len(column.vocabulary) + int(column.oov)
            if column.width == 0:
                raise TableError(
                    f"data.table.path={str(source.table['path'])!r}: category column {column.name!r} has no value in "
                    "any row. HINT: leave it out of the features."
                )
        else:
            column.width = widths.get(column.name, 0)
            if column.width == 0:
                raise TableError(
                    f"data.table.path={str(source.table['path'])!r}: array column {column.name!r} has no non-empty "
                    "row, so its width is unknown. HINT: leave it out of the features."
                )


def _read_rows(
    source: Source,
    layout: cols.Layout,
    params: Mapping[str, Any],
    sink: _Spill | InPlace,
    chunk_rows: int,
    stats: Stats,
) -> None:
    table = source.table
    features, label = [c.name for c in layout.columns], table["label"]
    partitions, classes = params["num_train_files"], params["num_classes"]
    row, said = 0, time.monotonic()
    units = source.units
    for number, unit in enumerate(units, 1):
        path = unit.path
        say(f"ingest: reading {path} (file {number} of {len(units)})")
        where_of = source.where(unit)
        file_rows = 0
        for chunk in source.chunks(
            unit, [*features, label], chunk_rows, [c.name for c in layout.columns if c.kind == cols.CATEGORY]
        ):
            if time.monotonic() - said >= PROGRESS_EVERY_S:
                say(f"ingest: {row:,} rows read")
                said = time.monotonic()
            n = len(chunk[label])
            labels = cols.numbers(chunk[label], where_of, label, file_rows)
            values, usable = layout.encode(chunk, n, where_of, file_rows)
            finite = usable & np.isfinite(labels)
            if not finite.all():
                first = int(np.flatnonzero(~finite)[0])
                if table["nan_policy"] == "error":
                    column = layout.first_bad(values[first]) if not usable[first] else label
                    raise TableError(
                        f"{where_of(column, file_rows + first)}: missing or non-finite value. "
                        "HINT: clean the table, or set data.table.nan_policy: drop to skip such rows."
                    )
                stats.rows_dropped += int((~finite).sum())
            ids = np.arange(row, row + n, dtype=np.int64)
            keep = np.flatnonzero(finite)
            _check_labels(labels[keep], file_rows + keep, classes, path, label)
            kept = values if keep.size == n else values[keep]
            targets = assign(ids[keep], params["seed"], table["val_fraction"], partitions)
            if layout.image is not None:
                layout.add_image_stats(kept[targets < partitions])
            sink.add(ids[keep], labels[keep], kept, targets)
            row, file_rows = row + n, file_rows + n
        if file_rows == 0:
            raise TableError(f"{path}: the file has no rows. HINT: remove it from the table or fill it.")
        stats.files.append({"file": str(path), "rows": file_rows})
    stats.rows_read = row


def _check_classes(source: Source, classes: int) -> list[str] | None:
    """A folder of images' class names, which data.num_classes must count."""
    if source.fmt != IMAGES:
        return None
    names = imagefolder.classes(source.root)
    if len(names) != classes and not (classes == 1 and len(names) == 2):
        raise TableError(
            f"data.table.path={str(source.table['path'])!r}: {len(names)} class folders ({', '.join(names[:10])}"
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
    table = params["table"]
    snapshot = delta_snapshot(table)
    if snapshot is not None:
        current = snapshot.identity()
    else:
        current = fingerprint(table["path"], table["format"]) if table.get("sha256") else None
    if table.get("sha256") and current != table["sha256"]:
        raise TableError(
            f"{table['path']}: the table's checksum differs from data.table.sha256 (the table changed). "
            "HINT: restore the table, or clear data.table.sha256 to ingest the new one as a new dataset."
        )
    source = open_source(table, snapshot)
    features = features_of(table, source)
    if snapshot is not None:
        delta.require_columns(table["path"], snapshot, [*features, table["label"]])
    partitions, classes = params["num_train_files"], params["num_classes"]
    class_names = _check_classes(source, classes)
    probe = chunk_rows or max(1024, CHUNK_VALUES // (len(features) + 1))
    layout = layout_of(source, features, params.get("image") or {}, probe)
    rows = chunk_rows or _chunk_rows(source, layout)
    out = Path(out_dir)
    (out / "train").mkdir(parents=True, exist_ok=True)
    names = [f"train/part-{t:05d}" for t in range(partitions)] + ["val"]
    counts = _known_counts(source, table, layout, params)
    stats = Stats()
    if counts is not None:
        _check_empty(table, [t for t in range(partitions + 1) if counts[t] == 0], int(counts.sum()), partitions)
        metadata = [_metadata(t, partitions) for t in range(partitions + 1)]
        paths = [out / f"{name}.safetensors" for name in names]
        placed = InPlace(paths, counts, metadata, layout.feature_spec(), binary=classes == 1)
        try:
            _read_rows(source, layout, params, placed, rows, stats)
        except BaseException:
            placed.abandon()
            raise
        say(f"ingest: {stats.rows_read:,} rows read into {partitions} train partitions and validation")
        entries = placed.finish()
    else:
        entries = _through_spill(source, layout, params, out, rows, stats, names)
    task = {**_task(params, layout), **({"classes": class_names} if class_names else {})}
    for name, entry in zip(names, entries, strict=True):
        atomic_write_json(out / f"{name}.json", {**entry, "task": task} if name == "val" else entry)
    summary = {
        "generator": GENERATOR,
        "format": source.fmt,
        "files": stats.files,
        "rows_read": stats.rows_read,
        "rows_dropped": stats.rows_dropped,
        "records": {"train": sum(e["records"] for e in entries[:-1]), "val": entries[-1]["records"]},
        "task": task,
    }
    if snapshot is not None:
        summary["delta"] = {"table_id": snapshot.table_id, "version": snapshot.version}
    atomic_write_json(out / "ingest.json", summary)
    return summary


def _chunk_rows(source: Source, layout: cols.Layout) -> int:
    """Rows per chunk: images a few hundred at a time; a typed table of numbers in chunks 4x the size of a
    CSV's (no float64 copy of them is made, and per-chunk work on 1,000 columns was a tenth of ingestion)."""
    if layout.image is not None:
        return IMAGE_CHUNK_ROWS
    typed = source.fmt == "parquet" and all(c.kind == cols.NUMBER for c in layout.columns)
    return max(1024, (CHUNK_VALUES * (4 if typed else 1)) // (layout.width + 1))


def _metadata(target: int, partitions: int) -> dict[str, str]:
    split = "val" if target == partitions else "train"
    return {"generator": GENERATOR, "split": split, "index": str(0 if split == "val" else target)}


def _check_empty(table: Mapping[str, Any], empty: list[int], usable: int, partitions: int) -> None:
    """A TableError naming the partitions (``partitions``: validation) that no row goes to."""
    if empty:
        which = ", ".join("validation" if t == partitions else f"train partition {t}" for t in empty)
        raise TableError(
            f"{table['path']}: {usable} usable rows leave {which} empty. "
            "HINT: lower data.num_train_files, raise data.table.val_fraction, or use a bigger table."
        )


def _known_counts(
    source: Source, table: Mapping[str, Any], layout: cols.Layout, params: Mapping[str, Any]
) -> np.ndarray | None:
    """Rows per target (train partitions, then validation) when they are known before reading: a Parquet
    table's (or Delta version's) row counts are in its files' footers, and a row's target is a function of
    its row number (snakeddp.data.inplace). None where the spill is needed."""
    if source.fmt != "parquet" or table["nan_policy"] != "error" or layout.image is not None:
        return None
    import pyarrow.parquet as pq

    total = 0
    for file in source.files:
        with _source(file.path) as stream:
            try:
                total += pq.ParquetFile(stream).metadata.num_rows
            except Exception:
                return None  # read as the spill path reads it, which names the file
    partitions = params["num_train_files"]
    counts = np.zeros(partitions + 1, dtype=np.int64)
    for start in range(0, total, 1 << 20):  # a block of row numbers at a time: memory stays small
        rows = np.arange(start, min(total, start + (1 << 20)), dtype=np.int64)
        counts += np.bincount(assign(rows, params["seed"], table["val_fraction"], partitions), minlength=partitions + 1)
    return counts


def _through_spill(
    source: Source,
    layout: cols.Layout,
    params: Mapping[str, Any],
    out: Path,
    rows: int,
    stats: Stats,
    names: list[str],
) -> list[dict[str, Any]]:
    """The rows through one spill file, then each partition written from its segments."""
    partitions = params["num_train_files"]
    spill = _Spill(out / ".spill", partitions + 1, binary=params["num_classes"] == 1)
    try:
        _read_rows(source, layout, params, spill, rows, stats)
        spill.finish()
        empty = [t for t in range(partitions + 1) if spill.count(t) == 0]
        _check_empty(source.table, empty, stats.rows_read - stats.rows_dropped, partitions)
        say(f"ingest: {stats.rows_read:,} rows read; writing {partitions} train partitions and validation")
        return [
            _write_partition(spill, target, out / f"{name}.safetensors", _metadata(target, partitions), rows)
            for target, name in enumerate(names)
        ]
    finally:
        spill.finish()
        spill.path.unlink(missing_ok=True)


def _task(params: Mapping[str, Any], layout: cols.Layout) -> dict[str, Any]:
    """The dataset's task: its labels, and its features as ingestion laid them out."""
    classes = params["num_classes"]
    return {"num_classes": classes, "kind": "binary" if classes == 1 else "multiclass", **layout.task_fields()}


def place(ingest_dir: str | Path, split: str, index: int, part: str | Path, entry_path: str | Path) -> dict[str, Any]:
    """Put one ingested partition (or the validation set) at its final path, with its entry.

    A hard link when the filesystem allows (no copy), else a copy; the entry is checked against
    the file first, so a damaged ingest directory is never passed on.
    """
    from snakeddp.data.partitions import verify_file

    name = "val" if split == "val" else f"train/part-{index:05d}"
    source = Path(ingest_dir) / f"{name}.safetensors"
    entry = json.loads((Path(ingest_dir) / f"{name}.json").read_text())
    verify_file(source, entry)
    target = Path(part)
    target.parent.mkdir(parents=True, exist_ok=True)
    link_or_copy(source, target)
    # Snakemake compares output times with its inputs'; the link keeps the ingest time otherwise.
    os.utime(target)
    entry["file"] = target.name
    atomic_write_json(entry_path, entry)
    return entry
