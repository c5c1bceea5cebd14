"""A table's feature columns as its partitions store them (snakeddp.data.columns' ``Layout``): each column's
kind from the files' types, the vocabularies of its category columns and the widths of its list columns
from one pass over them, and how many rows ingestion reads at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from snakeddp.data import columns as cols
from snakeddp.data import imagefolder, images
from snakeddp.data.source import IMAGES, Source
from snakeddp.errors import TableError
from snakeddp.util.terminal import say

# About 16 MB of float64 values per chunk: big enough to parse fast, small enough to never matter.
CHUNK_VALUES = 1 << 21
# Rows per chunk of a table of images: their encoded bytes and decoded pixels are what a chunk holds.
IMAGE_CHUNK_ROWS = 256


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
) -> cols.Layout:
    """The feature columns' layout: kinds from the files' types, then one pass over the category and
    variable-length array columns for their vocabularies and widths, said with ``announce`` (the terminal's
    for ingestion; the stream manifest, which makes the same pass beside it, its log's alone)."""
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
        _scan(source, scanned, rows, announce)
    return cols.Layout(columns, spec, refuse_images=source.table.nan_policy == "error")


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
