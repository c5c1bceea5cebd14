"""A table file's rows, a chunk at a time: a CSV's through pandas, a Parquet file's through pyarrow, local or
a stream of an object in storage (snakeddp.data.remote).

A chunk is a mapping of column name to the chunk's values: numpy from a CSV, pyarrow arrays from Parquet (the
columns' encoders, snakeddp.data.columns, read either). A partitioned table keeps a partition column's value
out of its data files (in a hive folder's name, or a Delta table's log): such a value is the same for all of
a file's rows, so it is added to each chunk as a column (``constants``); a column the file holds itself is
read from the file.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from snakeddp.config import parts
from snakeddp.data import delta, pagecache, remote
from snakeddp.errors import TableError

FORMATS = {".csv": "csv", ".csv.gz": "csv", ".parquet": "parquet", ".pq": "parquet"}
# A Parquet row group up to this size (uncompressed) is decoded whole; a bigger one batch by batch where that
# holds less memory (``decoded_whole``).
WHOLE_GROUP_BYTES = 256 << 20
# Streaming a big row group holds its stored (compressed) bytes anyway: it pays only where they are at most
# this share of what the group decodes to.
STREAMED_SHARE = 0.5
# Given a file's column names: the value of each wanted column it lacks, the same for all its rows.
Constants = Callable[[list[str]], dict[str, Any]]


def format_of(path: Path | str) -> str | None:
    """A file's format by its name (csv or parquet), None for another."""
    name = str(path).rpartition("/")[2].lower()
    return next((fmt for ext, fmt in FORMATS.items() if name.endswith(ext)), None)


@contextlib.contextmanager
def opened(path: Path | str) -> Iterator[Any]:
    """What pandas and pyarrow read: the local path, or a stream of the object (closed afterwards)."""
    if not remote.is_url(path):
        yield path
        return
    with remote.open_object(str(path)) as stream:
        yield stream


def where(path: Path | str, column: str, index: int) -> str:
    """'file, column, row' of a value; rows count data rows from 1 (a CSV's line is row + 1)."""
    line = f" (line {index + 2})" if format_of(path) == "csv" else ""
    return f"{path}: column {column!r}, row {index + 1}{line}"


def chunks(
    fmt: str,
    path: Path | str,
    columns: Sequence[str],
    rows: int,
    constants_of: Constants,
    text: Sequence[str] = (),
    footer: Any = None,
    groups: Sequence[int] | None = None,
) -> Iterator[dict[str, Any]]:
    """The file's ``columns`` in chunks of at most ``rows`` rows; ``text``: category columns, read as text;
    ``footer``: a Parquet file's metadata, when it was read already (``footer``); ``groups``: a Parquet file's
    row groups to read, in that order (all, in the file's order, by default)."""
    if not remote.is_url(path) and Path(path).stat().st_size == 0:
        raise TableError(f"{path}: the file is empty (0 bytes). HINT: remove it from the table or fill it.")
    if fmt == "csv":
        return _csv_chunks(path, columns, rows, constants_of, text)
    return _parquet_chunks(path, columns, rows, constants_of, footer, groups)


def _with_constants(chunk: dict[str, Any], constants: Mapping[str, Any], rows: int) -> dict[str, Any]:
    # Text (a hive folder's value) and null stay Python objects, as a CSV's cells are, for the encoders to read.
    return chunk | {
        name: np.full(rows, value, dtype=object if value is None or isinstance(value, str) else None)
        for name, value in constants.items()
    }


def csv_header(path: Path | str) -> list[str]:
    """A CSV file's column names (its first line)."""
    import pandas as pd

    with opened(path) as source:
        try:
            return list(pd.read_csv(source, nrows=0, compression=_compression(path)).columns)
        except pd.errors.EmptyDataError:
            raise TableError(f"{path}: the file is empty (no header line). HINT: remove it or fill it.") from None


def _compression(path: Path | str) -> str:
    # gzip by the name, as for a local path (a stream has none).
    return "gzip" if str(path).lower().endswith(".gz") else "infer"


def _csv_chunks(
    path: Path | str, columns: Sequence[str], rows: int, constants_of: Constants, text: Sequence[str] = ()
) -> Iterator[dict[str, Any]]:
    import pandas as pd

    constants = constants_of(csv_header(path))
    read = [c for c in columns if c not in constants]
    # Category columns as the text the file holds ("007" stays "007").
    dtype = {c: str for c in text if c in read}
    with opened(path) as source:
        reader = pd.read_csv(
            source, usecols=read, chunksize=rows, low_memory=True, compression=_compression(path), dtype=dtype or None
        )
        for frame in reader:
            yield _with_constants({name: frame[name].to_numpy() for name in read}, constants, len(frame))


def _parquet_chunks(
    path: Path | str,
    columns: Sequence[str],
    rows: int,
    constants_of: Constants,
    footer: Any = None,
    groups: Sequence[int] | None = None,
) -> Iterator[dict[str, Any]]:
    """Chunks of pyarrow arrays (numbers are made numpy by the columns' encoders, other kinds read them as typed)."""
    import pyarrow.parquet as pq

    with opened(path) as source:
        try:
            # A 1,000-column file's footer took 20-50 ms to parse, each time the file was opened. A local file's
            # column chunks are read as they are decoded, not a row group's at once first (pre_buffer): a 147 MB
            # row group of 1,000 float32 columns, cached, decoded in 0.3-0.8 s instead of 1.2-1.7 s at a peak RSS
            # of 275 MB instead of 411 MB. Over a network, buffered reads coalesce.
            handle = pq.ParquetFile(source, metadata=footer, pre_buffer=remote.is_url(path))
        except Exception as exc:
            raise unreadable_parquet(path, exc) from None
        with handle:
            constants = constants_of(handle.schema_arrow.names)
            read = [c for c in columns if c not in constants]
            # One row group at a time: iter_batches over the whole file keeps what it read until the
            # end (peak memory grew with the file); per row group it stays at about one group. A group is
            # decoded in one call, its columns on pyarrow's threads, unless streaming it holds less (decoded_whole):
            # batch by batch, a 1,000-column table paid pyarrow's per-column cost on every batch (ingestion 3x
            # pyarrow's read).
            for group in range(handle.num_row_groups) if groups is None else groups:
                if decoded_whole(handle.metadata.row_group(group)):
                    batches = handle.read_row_group(group, columns=read, use_threads=True).to_batches(rows)
                else:
                    batches = handle.iter_batches(batch_size=rows, row_groups=[group], columns=read, use_threads=False)
                for batch in batches:
                    # By position: batch.column(name) looks the name up among all columns, 1,000 x 1,000 times.
                    chunk = dict(zip(batch.schema.names, batch.columns, strict=True))
                    yield _with_constants(chunk, constants, batch.num_rows)
                if not remote.is_url(path):  # read once: its pages need not stay (snakeddp.data.pagecache)
                    pagecache.drop_read(path, handle.metadata.row_group(group))


def decoded_whole(group: Any) -> bool:
    """Whether a row group (its metadata) is decoded in one call rather than batch by batch. Up to
    WHOLE_GROUP_BYTES (as encoded) it is. A bigger one is streamed only where its column chunks are stored in well
    under the bytes they decode to: pyarrow's batch reader reads each column's whole stored chunk before the first
    batch and keeps each column's dictionary, so streaming a group of incompressible floats held more than decoding
    it whole. The issue's table (125,000 rows x 1,000 random float32 columns, one 756 MB row group per file, stored
    as large): 2.07 GB peak RSS streamed in batches of 8,381 rows, 0.96 GB decoded whole, in 1.2-3x the time."""
    if group.total_byte_size <= WHOLE_GROUP_BYTES:
        return True
    stored = decoded = 0
    for column in (group.column(i) for i in range(group.num_columns)):
        stored += column.total_compressed_size
        width = _WIDTHS.get(column.physical_type, 0)  # text and binary: as encoded
        decoded += max(column.total_uncompressed_size, column.num_values * width)
    return stored > STREAMED_SHARE * decoded


# Bytes per value of Parquet's fixed-width physical types, decoded.
_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}


def parquet_schema(path: Path | str) -> Any:
    """The arrow schema of a Parquet file (its footer only)."""
    return footer(path).schema.to_arrow_schema()


def footer(path: Path | str) -> Any:
    """A Parquet file's metadata (its footer: schema, row groups, row counts), or a TableError naming the file."""
    import pyarrow.parquet as pq

    with opened(path) as source:
        try:
            return pq.read_metadata(source)
        except Exception as exc:
            raise unreadable_parquet(path, exc) from None


def unreadable_parquet(path: Path | str, exc: Exception) -> TableError:
    return TableError(
        f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc}). HINT: the file is damaged or still being "
        "written: write it again (pandas' df.to_parquet, pyarrow.parquet.write_table), or set data.table.path to "
        "the table's complete files."
    )


# The columns a message names before it says how many there are.
_SHOWN = 12


def require_columns(path: Path | str, wanted: Sequence[str], present: list[str]) -> None:
    """A TableError naming the file and the columns it lacks, unless ``present`` holds every ``wanted`` one."""
    missing = [c for c in wanted if c not in present]
    if missing:
        # A wide table's every name made the line thousands of characters long, the close one lost among them.
        shown = ", ".join(map(str, present[:_SHOWN])) + (
            f", ... ({len(present)} columns)" if len(present) > _SHOWN else ""
        )
        close = difflib.get_close_matches(missing[0], list(map(str, present)), n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        raise TableError(
            f"{path}: no column {', '.join(map(repr, missing))} (the file has: {shown}). "
            f"HINT: {guess}fix data.table.features / data.table.label, or the file's header."
        )


def constants(
    path: Path | str,
    values: Mapping[str, Any],
    wanted: Sequence[str],
    table: parts.Table,
    snapshot: delta.Snapshot | None,
    present: list[str],
) -> dict[str, Any]:
    """The value, the same in all its rows, of each wanted column the file at ``path`` lacks: its partition value
    (``values``; None is null), or null where a later Delta commit added the column; a TableError for any other."""
    have = set(present)  # a set: a list's lookups were a second of a 1,000-column table's ingestion
    lacking = [c for c in wanted if c not in have]
    # A Delta table's schema has every wanted column (delta.require_columns): one that a file and its
    # partition values lack was added after the file was written.
    later = [c for c in lacking if c not in values] if snapshot is not None else []
    unknown = [c for c in lacking if c not in values and c not in later]
    require_columns(path, unknown, list(dict.fromkeys([*present, *values])))
    if later and table.nan_policy == "error":
        raise delta.added_later(table.path, snapshot, later[0], path)
    return {c: values.get(c) for c in lacking}
