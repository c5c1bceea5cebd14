"""What one ingestion reads: a table's format and files, in name order, each with the values its path or a
Delta log gives all its rows, and the table's columns.

``data.table.path`` names a CSV or Parquet file, a folder of them (hive-partitioned folders included:
``region=3/``, as Spark's ``partitionBy`` and pyarrow write them), a Delta table's folder (snakeddp.data.delta:
a version's data files, with the partition values of its log), a folder of images in class folders
(snakeddp.data.imagefolder), or an ``az://``, ``abfs://``, ``s3://`` or ``gs://`` URL of one
(snakeddp.data.remote: its objects are listed instead of a folder's files).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snakeddp.config import parts
from snakeddp.data import columns as cols
from snakeddp.data import delta, imagefolder, readers, remote
from snakeddp.data.readers import format_of
from snakeddp.errors import TableError

IMAGES = "images"
# A URL's listing as remote.list_objects gives it: its objects, and whether the URL names one object.
Listing = tuple[list[dict[str, Any]], bool]


@dataclass(frozen=True)
class TableFile:
    """One file of a table, with the values that its path or the Delta log give all its rows."""

    path: Path | str
    values: Mapping[str, Any] = field(default_factory=dict)
    """Partition column -> value (None: null), used where the file lacks the column."""


def _one_format(where: str, names: Sequence[str], fmt: str) -> str:
    formats = {f for f in map(format_of, names) if f} if fmt == "auto" else {fmt}
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
        found = format_of(objects[0]["name"]) if fmt == "auto" else fmt
        if found is None:
            raise TableError(f"{url}: cannot tell the table format from the name. HINT: set data.table.format.")
        return found, objects
    chosen = _one_format(url, [o["name"] for o in objects], fmt)
    return chosen, [o for o in objects if format_of(o["name"]) == chosen]


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
        found = format_of(root) if fmt == "auto" else fmt
        if found is None:
            raise TableError(f"{root}: cannot tell the table format from the name. HINT: set data.table.format.")
        return found, [(root, root.name)]
    if not root.is_dir():
        raise TableError(
            f"data.table.path={str(root)!r}: no such file or folder (relative to {Path.cwd()}). {_missing_hint(root)}"
        )
    if fmt == IMAGES or (fmt == "auto" and imagefolder.is_image_folder(root)):
        return IMAGES, [(p, p.relative_to(root).as_posix()) for p in imagefolder.image_files(root)]
    candidates = sorted(
        (p for p in root.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    chosen = _one_format(str(root), [p.name for p in candidates], fmt)
    return chosen, [(p, p.relative_to(root).as_posix()) for p in candidates if format_of(p) == chosen]


def _missing_hint(root: Path) -> str:
    """What to do about a table path that names nothing: the path in full where it starts with ~ (no shell
    expands it in a config), or the nearest name beside it, if one is close."""
    if str(root).startswith("~"):
        home = root.expanduser()
        return (
            f"HINT: '~' is not expanded in a config: write the path in full ({str(home)!r})."
            if home != root
            else "HINT: '~' is not expanded in a config: write the path in full."
        )
    try:
        beside = [p.name for p in root.parent.iterdir()] if root.parent.is_dir() else []
    except OSError:
        beside = []
    close = difflib.get_close_matches(root.name, beside, n=1)
    if close:
        return f"HINT: did you mean {str(root.parent / close[0])!r}? Set data.table.path to it."
    return (
        "HINT: set data.table.path to the file or folder (a relative path is read from the directory snakemake "
        "runs in, the checkout's root), or make the table first."
    )


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


def delta_snapshot(table: parts.Table, listed: Listing | None = None) -> delta.Snapshot | None:
    """The version of a Delta table that ``table`` (the data.table section) names; None for CSV/Parquet.
    ``listed``: a URL's listing, when the caller has taken it already."""
    path, fmt, version, pinned_id = table.path, table.format, table.version, table.table_id
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


@dataclass
class Source:
    """What one ingestion reads: the format, its files, the Delta version (if any), and the features resolved."""

    fmt: str
    files: list[TableFile]
    snapshot: delta.Snapshot | None
    table: parts.Table
    root: Path | None = None
    """A folder of images: its root (its files are the image files)."""
    footers: dict[str, Any] = field(default_factory=dict, repr=False)
    """Each Parquet file's footer, read once: the layout, the row counts and the rows all need it."""

    def footer(self, file: TableFile) -> Any:
        """A Parquet file's metadata (readers.footer), read the first time it is asked for."""
        key = str(file.path)
        if key not in self.footers:
            self.footers[key] = readers.footer(file.path)
        return self.footers[key]

    def chunks(
        self,
        source: TableFile,
        wanted: Sequence[str],
        rows: int,
        text: Sequence[str] = (),
        groups: Sequence[int] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """A unit's rows in chunks; ``groups``: a Parquet file's row groups to read, in that order (a window's)."""
        if self.fmt == IMAGES:
            return imagefolder.chunks(self.root, [f.path for f in self.files], rows)
        constants_of = functools.partial(
            readers.constants, source.path, source.values, wanted, self.table, self.snapshot
        )
        footer = self.footers.get(str(source.path)) if self.fmt == "parquet" else None
        return readers.chunks(self.fmt, source.path, wanted, rows, constants_of, text, footer, groups)

    @property
    def units(self) -> list[TableFile]:
        """What is read one after the other: each file, or the whole folder of images as one."""
        return [TableFile(self.root)] if self.fmt == IMAGES else self.files

    def paths_of(self, unit: TableFile) -> list[Path | str]:
        """The files a unit's rows come from: the file, or every image file of the folder."""
        return [f.path for f in self.files] if self.fmt == IMAGES else [unit.path]

    def where(self, unit: TableFile) -> cols.Where:
        if self.fmt == IMAGES:
            return lambda column, row: str(self.files[row].path)
        return functools.partial(readers.where, unit.path)


def open_source(table: parts.Table, snapshot: delta.Snapshot | None) -> Source:
    """The table's files as ingestion reads them: a Delta version's data files with their partition values, a
    folder of images' files, or a CSV/Parquet file or folder's files with their hive values."""
    if snapshot is not None:
        # The version planned: its data files, read as a Parquet table's, with the partition values of its
        # log; the log is delta-rs's to read.
        paths = delta.data_files(table.path, snapshot)
        files = [TableFile(p, v) for p, v in zip(paths, snapshot.partition_values, strict=True)]
        return Source("parquet", files, snapshot, table)
    fmt, files = table_sources(table.path, table.format)
    return Source(fmt, files, None, table, root=Path(table.path) if fmt == IMAGES else None)


def column_names(source: Source) -> list[str]:
    """The table's columns, as the first file (or a Delta version's schema) has them, partition columns included."""
    if source.fmt == IMAGES:
        return list(imagefolder.COLUMNS)
    if source.snapshot is not None:
        return list(source.snapshot.columns)
    if not source.files:
        raise TableError(f"data.table.path={source.table.path!r}: no data files. HINT: point it at a table.")
    first = source.files[0]
    header = readers.csv_header(first.path) if source.fmt == "csv" else readers.parquet_schema(first.path).names
    return list(dict.fromkeys([*header, *first.values]))


def check_columns(table: parts.Table, source: Source) -> None:
    """The configured features and label are columns of the table (its first file's, or the Delta version's), or
    a TableError in ingestion's words: asked when the workflow plans, before any job (a typo cost a failed
    ingestion, and a run started beside it)."""
    wanted = [*table.features, *([table.label] if table.label else [])]
    if source.fmt == IMAGES or not wanted:
        return
    if source.snapshot is not None:
        delta.require_columns(table.path, source.snapshot, wanted)
    elif source.files:
        readers.require_columns(source.files[0].path, wanted, column_names(source))


def features_of(table: parts.Table, source: Source) -> list[str]:
    """``data.table.features``, or every column but the label narrowed by the pattern and exclusions."""
    if table.features:
        return list(table.features)
    return cols.resolve_features(table, column_names(source), f"data.table.path={str(table.path)!r}")
