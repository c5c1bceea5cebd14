"""A table's feature columns as the tensors a partition stores: what each column is, and how a chunk of
its values is encoded.

A column is what its type says (Parquet and Delta data files carry types; a CSV's columns are numbers
unless ``data.table.categories`` lists them):

- **number** (integer, float, boolean, decimal): one float32 feature;
- **array** (a fixed-size list, or a list whose rows all have one length): that many float32 features, in
  order; a row of another length stops ingestion naming it;
- **category** (string, large string, dictionary, or any column listed in ``data.table.categories``): one-hot
  over its vocabulary, the column's values as text, sorted, built once from the whole table before the rows
  are read; ``unseen: oov`` adds an out-of-vocabulary slot (used at inference: ``Inputs.encode``);
- **image** (a binary column of encoded images, or Spark's image struct): uint8 [channels, H, W], decoded
  by snakeddp.data.images. An image column is the only feature of its table.

Number, array and category columns are laid side by side into one float32 row, in ``data.table.features``'
order; the layout (each column's kind, offset, width and vocabulary) is the ``inputs`` of the dataset's task,
recorded in its manifest, the run's provenance and an export, where ``Inputs.encode`` applies it to new rows.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snakeddp.config import parts
from snakeddp.data import images, readers
from snakeddp.errors import TableError

NUMBER, ARRAY, CATEGORY, IMAGE = "number", "array", "category", "image"
# A one-hot of more slots than this is a column to encode another way (hashed, grouped, an embedding id).
MAX_CATEGORIES = 1024
# Values of such a text column read as numbers to tell numbers stored as text from a category.
NUMBER_SAMPLE = 1000
# Where a value sits, for messages: (column, row index within the file) -> "file: column 'x', row 5".
Where = Callable[[str, int], str]
# float32 values in a 64-byte cache line (``_stride``).
_LINE_FLOATS = 16


# The column pandas' to_parquet writes for an unnamed index other than 0..n-1 (a filtered or shuffled frame): row
# numbers, not data, which a table's every column once trained on as a feature (a leak where rows are sorted).
PANDAS_INDEX = re.compile(r"__index_level_\d+__")
# A CSV's first column with no name in the header, as pandas reads it: the index its to_csv writes by default.
CSV_INDEX = "Unnamed: 0"


def _index_columns(names: Sequence[str]) -> set[str]:
    return {c for c in names if PANDAS_INDEX.fullmatch(c)} | ({CSV_INDEX} if names[:1] == [CSV_INDEX] else set())


def resolve_features(table: parts.Table, names: Sequence[str], where: str) -> list[str]:
    """``data.table.features`` as listed, or, left empty, every column in ``names`` but the label and
    ``exclude`` (and pandas' unnamed index), matching ``feature_pattern``: sorted by name, so a file's column order
    changes nothing."""
    if table.features:
        return list(table.features)
    # Asked first: a label the table lacks would leave the real one among the features, and the plan's check of
    # the columns then passed a typo that only ingestion (a job) refused.
    readers.require_columns(where, [table.label], list(names))
    unknown = [c for c in table.exclude if c not in names]
    if unknown:
        raise TableError(
            f"{where}: data.table.exclude names {', '.join(map(repr, unknown))}, which the table does not have "
            f"(it has: {_shown(names)}). HINT: fix data.table.exclude."
        )
    pattern = table.feature_pattern
    index = _index_columns(list(names))
    chosen = sorted(
        c
        for c in dict.fromkeys(names)
        if c != table.label
        and c not in table.exclude
        and c not in index
        and (pattern is None or fnmatch.fnmatchcase(c, pattern))
    )
    if not chosen:
        narrowed = f" matching {pattern!r}" if pattern else ""
        raise TableError(
            f"{where}: no feature column{narrowed} besides the label {table.label!r} (the table has: "
            f"{_shown(names)}). HINT: list data.table.features, or fix data.table.feature_pattern / exclude."
        )
    return chosen


def _shown(names: Sequence[str], most: int = 12) -> str:
    names = list(names)
    return ", ".join(names[:most]) + (f", ... ({len(names)} columns)" if len(names) > most else "")


def kind_of(name: str, arrow_type: Any, categories: Iterable[str], where: str) -> str:
    """The kind of a column of a typed file (a pyarrow type), or a TableError naming it."""
    import pyarrow as pa

    t = pa.types
    if name in categories:
        return CATEGORY
    if t.is_integer(arrow_type) or t.is_floating(arrow_type) or t.is_boolean(arrow_type) or t.is_decimal(arrow_type):
        return NUMBER
    if t.is_string(arrow_type) or t.is_large_string(arrow_type) or t.is_dictionary(arrow_type):
        return CATEGORY
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type):
        return IMAGE
    if t.is_struct(arrow_type) and images.is_spark_image(
        [arrow_type.field(i).name for i in range(arrow_type.num_fields)]
    ):
        return IMAGE
    if (t.is_fixed_size_list(arrow_type) or t.is_list(arrow_type) or t.is_large_list(arrow_type)) and (
        t.is_integer(arrow_type.value_type) or t.is_floating(arrow_type.value_type)
    ):
        return ARRAY
    raise TableError(
        f"{where}: column {name!r} is {arrow_type}, which snakeddp does not train on (numbers, arrays of numbers, "
        "strings or categories, images). HINT: leave it out of data.table.features (or add it to data.table.exclude), "
        "or convert it in the table."
    )


@dataclass
class Column:
    """One feature column: its kind, and what its encoding needs (width, vocabulary, image size)."""

    name: str
    kind: str
    width: int = 1
    vocabulary: tuple[str, ...] = ()
    oov: bool = False
    shape: tuple[int, ...] = ()
    """[channels, H, W] of an image column (set by the first image decoded when data.image.size is null)."""

    def describe(self, offset: int) -> dict[str, Any]:
        entry: dict[str, Any] = {"column": self.name, "kind": self.kind}
        if self.kind == IMAGE:
            return entry | {"shape": list(self.shape)}
        entry |= {"offset": offset, "width": self.width}
        if self.kind == CATEGORY:
            entry |= {"vocabulary": list(self.vocabulary), "oov": self.oov}
        return entry


@dataclass
class Layout:
    """The feature columns of one table, in order, and how to encode a chunk of rows."""

    columns: list[Column]
    spec: images.ImageSpec
    refuse_images: bool = True
    """nan_policy error: an image that cannot be decoded stops ingestion (drop: it is a missing value)."""
    image_stats: list[np.ndarray] = field(default_factory=lambda: [np.zeros(0), np.zeros(0), np.zeros(1)])
    _scratch: np.ndarray | None = field(default=None, repr=False, compare=False)
    _rows: _Blocks = field(default_factory=lambda: _Blocks(), repr=False, compare=False)

    @property
    def image(self) -> Column | None:
        return next((c for c in self.columns if c.kind == IMAGE), None)

    @property
    def width(self) -> int:
        return sum(c.width for c in self.columns)

    def feature_spec(self) -> tuple[str, tuple[int, ...]]:
        """The dtype and per-row shape of the features tensor (an image's once its shape is known)."""
        image = self.image
        return ("<u1", image.shape) if image is not None else ("<f4", (self.width,))

    def describe(self) -> list[dict[str, Any]]:
        offsets = np.cumsum([0, *(c.width for c in self.columns)])
        return [c.describe(int(o)) for c, o in zip(self.columns, offsets, strict=False)]

    def encode(
        self, chunk: Mapping[str, Any], rows: int, where: Where, first_row: int, order: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The chunk's features ([rows, width] float32, or [rows, C, H, W] uint8) and which rows have a usable
        value in every column; a TableError names the first value that can never be used. ``order``: the rows'
        order in the result (a permutation of the chunk's rows, the order they are written in), or as read."""
        image = self.image
        if image is None and all(c.kind == NUMBER and _is_float(chunk[c.name]) for c in self.columns):
            return self._floats_only(chunk, rows, order)
        if image is not None:
            out, ok = self._images(image, chunk[image.name], rows, where, first_row)
        else:
            out, ok = self._mixed(chunk, rows, where, first_row)
        return (out, ok) if order is None else (out[order], ok[order])

    def _mixed(
        self, chunk: Mapping[str, Any], rows: int, where: Where, first_row: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Numbers, arrays and categories side by side, column by column."""
        out = np.zeros((rows, self.width), dtype=np.float32)
        ok = np.ones(rows, dtype=bool)
        offset = 0
        for column in self.columns:
            target = out[:, offset : offset + column.width]
            values = chunk[column.name]
            if column.kind == NUMBER:
                with np.errstate(over="ignore"):  # beyond float32: an unusable infinity, as in _floats_only
                    target[:, 0] = (
                        _floats(values) if _is_float(values) else numbers(values, where, column.name, first_row)
                    )
            elif column.kind == ARRAY:
                ok &= _array(values, target, where, column.name, first_row)
            else:
                ok &= _one_hot(values, column, target)
            offset += column.width
        ok &= np.isfinite(out).all(axis=1)
        return out, ok

    def _floats_only(
        self, chunk: Mapping[str, Any], rows: int, order: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """A wide table of float columns: each column copied into a column-major block (reused from chunk to
        chunk), then laid out as rows, each at its place in ``order``, by one compiled transpose, into a block
        of rows reused too once the sink has let go of it (``_Blocks``).
        At 100,000 rows x 1,000 columns this took 0.31-0.56 s where a fresh block and a Python loop scattering
        64 rows at a time took 0.70-0.74 s (half of it the kernel zeroing fresh pages for the block)."""
        by_column = self._block(rows)
        # A float64 beyond float32's range is stored as an infinity, whose row is unusable like any other's: numpy's
        # own warning about it went to the user's log as a bare RuntimeWarning.
        with np.errstate(over="ignore"):
            for j, column in enumerate(self.columns):
                by_column[j] = _floats(chunk[column.name])
        out = self._rows.take(rows, self.width)
        places = np.arange(rows) if order is None else np.empty(rows, dtype=np.intp)
        if order is not None:
            places[order] = np.arange(rows)
        # One compiled pass. Split over threads it was no faster (the copy is bound by memory: 10.5 ms for 33 MB
        # on one thread, 10.7 on two) and, on 2 cores busy with decoding and writing, slower: 2.7-7.1 s against
        # 2.4-4.5 s per 200,000 rows, each chunk waiting for the threads' turn.
        out[places] = by_column.T
        # A finite sum has no NaN or infinity in it: one pass, and the per-row check only when it is not.
        if np.isfinite(by_column.sum()):
            return out, np.ones(rows, dtype=bool)
        usable = np.isfinite(by_column).all(axis=0)
        return out, usable if order is None else usable[order]

    def _block(self, rows: int) -> np.ndarray:
        """A [width, rows] float32 block for ``_floats_only``, the same memory for every chunk of a table, its
        columns ``_stride`` apart."""
        if self._scratch is None or self._scratch.shape[1] < rows:
            self._scratch = np.empty((self.width, _stride(rows)), dtype=np.float32)
        return self._scratch[:, :rows]

    def first_bad(self, features: np.ndarray) -> str:
        """The first column of a row whose features are not all usable (for a message)."""
        if features.dtype == np.uint8:
            return self.columns[0].name
        offset = 0
        for column in self.columns:
            block = features[offset : offset + column.width]
            if not np.isfinite(block).all() or (column.kind == CATEGORY and not block.any()):
                return column.name
            offset += column.width
        return self.columns[-1].name

    def _images(
        self, column: Column, values: Any, rows: int, where: Where, first_row: int
    ) -> tuple[np.ndarray, np.ndarray]:
        decoded: list[np.ndarray | None] = []
        for i, value in enumerate(_image_values(values)):
            if value is None:
                decoded.append(None)
                continue
            try:
                pixels = (
                    images.from_spark(value, self.spec) if isinstance(value, dict) else images.decode(value, self.spec)
                )
            except images.ImageRefused as why:
                if self.refuse_images:
                    origin = f" ({value['origin']})" if isinstance(value, dict) and value.get("origin") else ""
                    raise images.refused(where(column.name, first_row + i) + origin, why) from None
                decoded.append(None)
                continue
            if not column.shape:
                column.shape = tuple(pixels.shape)
            if pixels.shape != column.shape:
                raise TableError(
                    f"{where(column.name, first_row + i)}: image of {pixels.shape[2]}x{pixels.shape[1]} pixels, and "
                    f"the first was {column.shape[2]}x{column.shape[1]}. HINT: set data.image.size: [H, W] to resize "
                    "and centre-crop every image to one size."
                )
            decoded.append(pixels)
        ok = np.array([d is not None for d in decoded], dtype=bool)
        out = np.zeros((rows, *(column.shape or (self.spec.channels, 1, 1))), dtype=np.uint8)
        for i, pixels in enumerate(decoded):
            if pixels is not None:
                out[i] = pixels
        return out, ok

    def add_image_stats(self, pixels: np.ndarray) -> None:
        """Per-channel sums of pixels and of their squares over train rows (exact in float64)."""
        as_float = pixels.astype(np.float64)
        sums = as_float.sum(axis=(0, 2, 3))
        squares = np.square(as_float).sum(axis=(0, 2, 3))
        count = pixels.shape[0] * pixels.shape[2] * pixels.shape[3]
        if self.image_stats[0].size == 0:
            self.image_stats = [np.zeros_like(sums), np.zeros_like(squares), np.zeros(1)]
        self.image_stats[0] += sums
        self.image_stats[1] += squares
        self.image_stats[2] += count

    def task_fields(self) -> dict[str, Any]:
        """What the dataset's task records of its features."""
        found: dict[str, Any] = {"inputs": self.describe()}
        image = self.image
        if image is None:
            return {"num_features": self.width, **found}
        sums, squares, count = self.image_stats
        mean = sums / count[0] / 255.0 if count[0] else np.zeros(image.shape[0])
        var = squares / count[0] / 255.0**2 - mean**2 if count[0] else np.ones(image.shape[0])
        std = np.sqrt(np.maximum(var, 1e-12))
        return {
            "num_features": int(np.prod(image.shape)),
            "input_shape": list(image.shape),
            "image": {"mean": [round(float(m), 8) for m in mean], "std": [round(float(s), 8) for s in std]},
            **found,
        }


def _stride(rows: int) -> int:
    """Floats from one column's start to the next's in ``_floats_only``'s column-major block: ``rows`` rounded up to
    an odd number of 64-byte cache lines. The transpose reads a value of each column in turn: columns a power of two
    of lines apart fall in the same few cache sets, and columns that start mid-line cost two lines each. 8,381 rows
    (ingestion's chunk of 1,000 float32 columns) took 2.4 us a row 8,381 floats apart and 1.5 us 8,400 apart; 8,192
    rows 9.3 us at 8,192 and 1.3 us at 8,208 (one core, numpy 2.4)."""
    return (-(-rows // _LINE_FLOATS) | 1) * _LINE_FLOATS


class _Blocks:
    """[rows, width] float32 blocks that ``_floats_only`` lays chunks out in, each handed out again once nothing
    else refers to it. A fresh block per chunk (33 MB for 8,381 rows x 1,000 columns) was a fresh mapping (glibc
    maps any block over 32 MB): page faults, zeroing and munmap every chunk. A chunk's rows are still held after
    ``encode`` returns (the caller's, the writes queued on a sink's thread: snakeddp.data.inplace.WRITES_AHEAD), so
    a block is free only when its reference count, which each view of it (a slice, a memoryview) raises, is the
    pool's own: the same as a block that nothing else ever held, counted the same way."""

    MOST = 3
    """Blocks kept: the chunk laid out and the two before it, which the caller (until it hands on the next one) and
    the writes a sink has queued (snakeddp.data.inplace.WRITES_AHEAD) may hold; each kept block is peak memory."""

    def __init__(self) -> None:
        self.blocks: list[np.ndarray] = []
        self._unheld = [np.empty(0, dtype=np.float32)]  # counted as a kept block is, for the count of a free one

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return _Blocks, ()  # a layout sent elsewhere (a Spark task) takes no blocks with it

    def take(self, rows: int, width: int) -> np.ndarray:
        free = sys.getrefcount(self._unheld[0])
        for i in range(len(self.blocks)):
            if self.blocks[i].shape[1] == width and self.blocks[i].shape[0] >= rows:
                if sys.getrefcount(self.blocks[i]) == free:
                    return self.blocks[i][:rows]
        block = np.empty((rows, width), dtype=np.float32)
        if len(self.blocks) < self.MOST:
            self.blocks.append(block)
        return block


def _image_values(values: Any) -> list[Any]:
    """A chunk of an image column as a list of bytes, Spark image structs (dicts) or None."""
    if hasattr(values, "to_pylist"):
        return values.to_pylist()
    return list(values)


def _is_float(values: Any) -> bool:
    """A float column chunk from a typed file: copied as it is (nulls as NaN), no float64 detour."""
    return getattr(getattr(values, "type", None), "bit_width", 0) in (32, 64) and str(values.type).startswith(
        ("float", "double")
    )


def _floats(values: Any) -> np.ndarray:
    # float64 -> float32 rounds as numbers()' float64 values did when stored: the same bits either way.
    return as_numpy(values)


def as_numpy(values: Any) -> np.ndarray:
    """A column chunk (a pyarrow array, or numpy from CSV and partition values) as numpy; nulls as NaN/None."""
    if hasattr(values, "to_numpy"):
        if hasattr(values, "type"):
            return _view(values) if _plain(values) else values.to_numpy(zero_copy_only=False)
    return np.asarray(values)


def _plain(values: Any) -> bool:
    """An arrow array of fixed-width numbers with no nulls, whose data buffer numpy can read as it is."""
    kind = str(getattr(values, "type", ""))
    return (
        values.null_count == 0
        and hasattr(values, "buffers")
        and (kind in ("float", "double") or kind.startswith(("int", "uint")))
    )


def _view(values: Any) -> np.ndarray:
    """numpy over an arrow array's own data buffer (no copy). pyarrow's to_numpy imports pandas for its
    conversions, zero-copy ones included: 1-2 s of a wide Parquet table's ingestion, which needs no pandas."""
    dtype = np.dtype({"float": "<f4", "double": "<f8"}.get(str(values.type)) or values.type.to_pandas_dtype())
    return np.frombuffer(values.buffers()[1], dtype=dtype, count=len(values), offset=values.offset * dtype.itemsize)


def numbers(values: Any, where: Where, column: str, first_row: int, label: bool = False) -> np.ndarray:
    """float64 values of a column chunk, or a TableError at the first value that is not a number (``label``: the
    label column's, which no category makes a number: its HINT is to encode it as the class indices)."""
    values = as_numpy(values)
    if values.dtype.kind in "biuf":
        return values.astype(np.float64, copy=False)
    import pandas as pd

    converted = pd.to_numeric(pd.Series(values, copy=False), errors="coerce").to_numpy(dtype=np.float64)
    present = pd.notna(values) & (pd.Series(values, copy=False).astype(str).str.strip() != "").to_numpy()
    bad = np.flatnonzero(np.isnan(converted) & present)
    if bad.size and label:
        raise TableError(
            f"{where(column, first_row + int(bad[0]))}: {values[bad[0]]!r} is not a number, and the label column "
            "holds class indices (0..data.num_classes-1, or 0/1 where data.num_classes is 1). HINT: encode the "
            f"label where the table is written (pandas: df[{column!r}] = df[{column!r}].astype('category').cat.codes), "
            "or set data.table.label to the column that holds them."
        )
    if bad.size:
        raise TableError(
            f"{where(column, first_row + int(bad[0]))}: {values[bad[0]]!r} is not a number. "
            "HINT: features and labels must be numeric; a text feature (a CSV's column, a hive folder's "
            f"{column}=... name) is a category when data.table.categories lists it: categories: [{column}]."
        )
    return converted


def _array(values: Any, target: np.ndarray, where: Where, column: str, first_row: int) -> np.ndarray:
    """Fill ``target`` [rows, width] from a list column; a row of another length is a TableError."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        raise TableError(
            f"{where(column, first_row)}: an array column needs a typed table (Parquet, Delta). HINT: write the "
            "table as Parquet, or spread the array over columns of numbers."
        )
    width = target.shape[1]
    lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
    present = ~np.isnan(lengths.astype(np.float64))
    wrong = np.flatnonzero(present & (np.nan_to_num(lengths, nan=width) != width))
    if wrong.size:
        row = int(wrong[0])
        raise TableError(
            f"{where(column, first_row + row)}: an array of {int(lengths[row])} values, and the column's arrays have "
            f"{width}. HINT: give every row of {column!r} {width} values (or a null, a missing value)."
        )
    flat = pc.list_flatten(values.filter(pa.array(present))).to_numpy(zero_copy_only=False)
    target[present] = flat.astype(np.float64, copy=False).reshape(-1, width)
    target[~present] = np.nan
    return present


def texts(values: Any) -> np.ndarray:
    """A category column's values as text (object array, None for null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
            values = pc.cast(values, pa.string())
        return values.to_numpy(zero_copy_only=False)
    import pandas as pd

    array = np.asarray(values, dtype=object)
    missing = pd.isna(array)
    out = np.empty(len(array), dtype=object)
    out[~missing] = [str(v) for v in array[~missing]]
    out[missing] = None
    return out


def codes(values: Any, column: Column) -> np.ndarray:
    """Each value's index in the column's vocabulary; -1 for null, -2 for a value outside it."""
    import pandas as pd

    text = texts(values)
    # An index's lookup, not a Categorical of values outside its categories, which pandas 3 deprecates (pandas 4
    # raises): -1 for a null and for an unseen value alike, told apart below.
    found = pd.Index(list(column.vocabulary), dtype=object).get_indexer(text).astype(np.int64)
    unseen = (found < 0) & np.array([t is not None for t in text], dtype=bool)
    found[unseen] = -2
    return found


def _one_hot(values: Any, column: Column, target: np.ndarray) -> np.ndarray:
    found = codes(values, column)
    rows = np.flatnonzero(found >= 0)
    target[rows, found[rows]] = 1.0
    return found >= 0


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def numbers_as_text(column: Column) -> str | None:
    """A line for a category column whose every value reads as a number (codes such as zip codes, or numbers a CSV
    loaded as text): it trains as a one-hot, which may not be what was meant, and nothing else would say so."""
    if not column.vocabulary or not all(_is_number(value) for value in column.vocabulary):
        return None
    shown = ", ".join(map(repr, column.vocabulary[:3])) + (", ..." if len(column.vocabulary) > 3 else "")
    return (
        f"ingest: column {column.name!r} holds numbers stored as text ({shown}): it trains as a category of "
        f"{len(column.vocabulary)} one-hot slots; cast it to a number in the table to train it as one"
    )


def vocabulary(values: Iterable[str], column: str, where: str) -> tuple[str, ...]:
    """The sorted vocabulary of a category column, or a TableError when it is too large for a one-hot."""
    found = tuple(sorted(values))
    if len(found) > MAX_CATEGORIES:
        # A text column whose values all read as numbers is numbers stored as text (a CSV loaded without types, a
        # cast gone wrong), not a category with too many values: a sample spread over the sorted values decides.
        sample = found[:: max(1, len(found) // NUMBER_SAMPLE)]
        if all(_is_number(v) for v in sample):
            raise TableError(
                f"{where}: column {column!r} holds numbers stored as text ({', '.join(map(repr, sample[:3]))}, ...), "
                f"so it would be a category of {len(found):,} values. HINT: cast it to a number where the table is "
                f"written (pandas: df[{column!r}] = pd.to_numeric(df[{column!r}]); pyarrow: "
                f"pyarrow.compute.cast(table[{column!r}], pyarrow.float64()); SQL: CAST({column} AS DOUBLE)), then "
                "rerun."
            )
        raise TableError(
            f"{where}: category column {column!r} has {len(found):,} distinct values, over {MAX_CATEGORIES} (a "
            "one-hot of each). HINT: group or hash its rare values in the table, or leave it out of the features "
            f"(with data.table.features left out: data.table.exclude: [{column}])."
        )
    return found


class Inputs:
    """A trained model's feature layout (its dataset's task ``inputs``), applied to new rows at inference:
    ``snakeddp.inputs(EXPORT_DIR).encode({"x1": [...], "city": [...]})`` gives the model's input tensor."""

    def __init__(self, task: Mapping[str, Any], image: Mapping[str, Any] | None = None) -> None:
        self.task = dict(task)
        self.columns = [
            Column(
                name=e["column"],
                kind=e["kind"],
                width=e.get("width", 1),
                vocabulary=tuple(e.get("vocabulary", ())),
                oov=bool(e.get("oov")),
                shape=tuple(e.get("shape", ())),
            )
            for e in self.task.get("inputs", [])
        ]
        shape = self.task.get("input_shape")
        section = dict(image or {})
        if shape:
            section |= {"size": shape[1:], "channels": shape[0]}
        self.layout = Layout(self.columns, images.ImageSpec.of(section))

    def encode(self, rows: Mapping[str, Any]) -> Any:
        """Raw column values (a mapping or DataFrame of columns) as the float tensor the model takes; an unseen
        category value is refused (``unseen: error``) or given the out-of-vocabulary slot (``oov``)."""
        import torch

        if not self.columns:
            raise TableError(
                "this model's dataset recorded no column layout (a synthetic dataset, or one ingested before "
                "layouts were recorded). HINT: give the model its feature tensor directly."
            )
        missing = [c.name for c in self.columns if c.name not in rows]
        if missing:
            raise TableError(
                f"no column {', '.join(map(repr, missing))} in the rows given. HINT: pass every feature column."
            )
        count = len(rows[self.columns[0].name])
        for column in self.columns:
            if column.kind != CATEGORY:
                continue
            found = codes(rows[column.name], column)
            if (found == -2).any():
                value = texts(rows[column.name])[int(np.flatnonzero(found == -2)[0])]
                if not column.oov:
                    raise TableError(
                        f"column {column.name!r}: {value!r} is not in the vocabulary the model was trained with "
                        f"({len(column.vocabulary)} values). HINT: train with data.table.unseen: oov to map such "
                        "values to an out-of-vocabulary slot, or pass a known value."
                    )
        encoded, ok = self._encode(rows, count)
        if self.layout.image is None and not ok.all():
            row = int(np.flatnonzero(~ok)[0])
            raise TableError(f"row {row}: a missing or non-finite value. HINT: fill it before predicting.")
        features = torch.from_numpy(encoded)
        if features.dtype != torch.uint8:
            return features
        from snakeddp.data.augment import ImageBatches

        # Scaled and standardised as training's DataModule did (with the statistics the export recorded).
        normalize = {"normalize": "image" in self.task}
        return ImageBatches(self.task, normalize, seed=0)(features, torch.arange(count), 0, train=False)

    def _encode(self, rows: Mapping[str, Any], count: int) -> tuple[np.ndarray, np.ndarray]:
        if self.layout.image is not None:
            return self.layout.encode(rows, count, lambda column, row: f"column {column!r}, row {row}", 0)
        out = np.zeros((count, self.layout.width), dtype=np.float32)
        ok = np.ones(count, dtype=bool)
        offset = 0
        for column in self.columns:
            target = out[:, offset : offset + column.width]
            if column.kind == CATEGORY:
                found = codes(rows[column.name], column)
                oov = column.width - 1
                target[found >= 0, found[found >= 0]] = 1.0
                target[found == -2, oov] = 1.0
                ok &= found != -1
            elif column.kind == ARRAY:
                # A DataFrame's array column is a Series of lists or arrays: stacked row by row.
                target[:] = np.stack([np.asarray(v, dtype=np.float32) for v in rows[column.name]]).reshape(
                    count, column.width
                )
            else:
                target[:, 0] = np.asarray(rows[column.name], dtype=np.float64)
            offset += column.width
        return out, ok & np.isfinite(out).all(axis=1)
