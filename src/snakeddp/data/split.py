"""Which partition each row of a table goes to, and how many rows each gets.

A row is dealt to validation or one of the P train partitions by a seeded hash of its row number alone, so
the split does not depend on chunk sizes, file boundaries or the machine. Where a table's row count is known
before it is read (a Parquet table's or a Delta version's files' footers hold it), so is every partition's
size (``known_counts``), and the partitions can be written in place as the rows arrive (snakeddp.data.inplace).

The global split (``assign``) deals every row over all P partitions, so partition 0 is complete only once the
last row is read. A Parquet table of at least one window's rows (``WINDOW_ROWS``) is split by windows instead
(``windows``, ``deal``): its row groups, in a seeded order, are cut into windows of at least ``WINDOW_ROWS``
rows, which lie side by side along the partitions, each as long as its rows, and each window's rows are dealt
by the same seeded hash over the partitions it lies on (``Window.span``). Partition 0 is then complete after the
first window(s), and each later one as its last window is read; validation takes the same rows as the global
split's, from every window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from snakeddp.config import parts
from snakeddp.data.source import Source
from snakeddp.errors import TableError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# Row numbers hashed at a time while counting: memory stays small whatever the table's size.
_BLOCK = 1 << 20
# The fewest rows of a window (MosaicML Streaming's default shuffle block): a table with fewer keeps the global
# split. Shuffling reaches across this many rows at least, in row groups drawn from the whole table.
WINDOW_ROWS = 1 << 18
# Added to the seed for the row groups' order, so that order is not the rows' own hash of the same numbers.
_ORDER_SALT = 0x5EED_0F_0DE5


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


@dataclass(frozen=True)
class RowGroup:
    """One Parquet row group of a table: the file (its index in the table's name order), the group's index in
    that file, its first row's number in the table (counting across files in name order) and its rows."""

    file: int
    group: int
    first_row: int
    rows: int


@dataclass(frozen=True)
class Window:
    """Row groups read one after the other, whose rows are dealt together (``deal``)."""

    index: int
    groups: tuple[RowGroup, ...]
    """In the order they are read and their rows stored: the seeded order (``windows``)."""
    span: range
    """The train partitions this window's train rows go to (validation takes its share of every window)."""
    completes: tuple[int, ...]
    """The train partitions complete once this window is read (this is the last window that feeds them)."""
    before: int
    """Rows of the windows read before it."""
    total: int
    """Rows of the whole table."""

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)

    def row_numbers(self) -> np.ndarray:
        """The table row numbers of this window's rows, in the order they are read."""
        if not self.groups:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(g.first_row, g.first_row + g.rows, dtype=np.int64) for g in self.groups])


def row_groups(rows_per_group: Sequence[Sequence[int]]) -> list[RowGroup]:
    """The table's row groups from each file's groups' row counts (files in name order)."""
    found, first = [], 0
    for file, groups in enumerate(rows_per_group):
        for group, rows in enumerate(groups):
            found.append(RowGroup(file, group, first, int(rows)))
            first += int(rows)
    return found


def windows(groups: Sequence[RowGroup], seed: int, partitions: int, min_rows: int | None = None) -> list[Window] | None:
    """The table's windows: its row groups in a seeded order (a hash of the seed and each group's index, so
    the same on every machine and for any reader), cut into windows of at least ``min_rows`` rows
    (``WINDOW_ROWS``; what is left at the end joins the last window). None for a table of fewer rows than one
    window: it keeps the global split (``assign``).

    The windows, in order, lie side by side along the P train partitions, each as long as its rows: window w
    covers ``[before * P / N, (before + rows) * P / N)`` (``before``: the rows of the windows before it; N: the
    table's), so every partition gets its share of the rows (W >= P: consecutive windows fill one partition;
    W < P: a window is dealt over several), and a partition at a window's edge is shared with the next.
    """
    min_rows = WINDOW_ROWS if min_rows is None else min_rows
    total = sum(g.rows for g in groups)
    if total < max(min_rows, 1):
        return None
    keys = _row_keys(np.arange(len(groups), dtype=np.int64), seed + _ORDER_SALT)
    cut: list[list[RowGroup]] = [[]]
    for index in np.argsort(keys, kind="stable"):
        if sum(g.rows for g in cut[-1]) >= min_rows:
            cut.append([])
        cut[-1].append(groups[int(index)])
    if len(cut) > 1 and sum(g.rows for g in cut[-1]) < min_rows:
        cut[-2].extend(cut.pop())
    starts = np.cumsum([0, *(sum(g.rows for g in window) for window in cut)]).tolist()
    # Integer bounds (no rounding differs between machines): the partitions the window's interval touches.
    spans = [
        range(starts[w] * partitions // total, max(1, -(-starts[w + 1] * partitions // total))) for w in range(len(cut))
    ]
    last = {p: w for w, span in enumerate(spans) for p in span}
    return [
        Window(w, tuple(cut[w]), spans[w], tuple(p for p in spans[w] if last[p] == w), starts[w], total)
        for w in range(len(cut))
    ]


def deal(window: Window, rows: np.ndarray, seed: int, val_fraction: float, partitions: int) -> np.ndarray:
    """Target of each of ``rows`` (table row numbers of ``window``'s rows): ``partitions`` for validation, by the
    seeded hash of the row number that ``assign`` uses (the same rows as the global split's), else the train
    partition at the row's place in the window's interval (``windows``), that hash placing it there."""
    u = _row_keys(rows, seed)
    train = (u - val_fraction) / (1.0 - val_fraction)
    place = (window.before + train * window.rows) * partitions / window.total
    target = np.clip(np.floor(place).astype(np.int64), window.span.start, window.span.stop - 1)
    return np.where(u < val_fraction, partitions, target)


def window_counts(found: Sequence[Window], seed: int, val_fraction: float, partitions: int) -> np.ndarray:
    """Rows per target (train partitions, then validation) of a windowed split, known before reading."""
    counts = np.zeros(partitions + 1, dtype=np.int64)
    for window in found:
        for group in window.groups:
            for start in range(group.first_row, group.first_row + group.rows, _BLOCK):
                rows = np.arange(start, min(group.first_row + group.rows, start + _BLOCK), dtype=np.int64)
                counts += np.bincount(deal(window, rows, seed, val_fraction, partitions), minlength=partitions + 1)
    return counts


def windows_of(source: Source, seed: int, partitions: int, min_rows: int | None = None) -> list[Window] | None:
    """A table's windows (``windows``) from its files' footers, no row read; None where it keeps the global
    split: not Parquet (a CSV's rows are counted only by reading it), ``nan_policy: drop`` (a dropped row
    would move the partitions' sizes, which a window's partitions must know to be published as written), a
    footer that cannot be read (the read that follows names the file), or fewer rows than one window."""
    if source.fmt != "parquet" or source.table.nan_policy != "error":
        return None
    try:
        sizes = [
            [footer.row_group(g).num_rows for g in range(footer.num_row_groups)]
            for footer in (source.footer(file) for file in source.files)
        ]
    except TableError:
        return None
    return windows(row_groups(sizes), seed, partitions, min_rows)


def known_counts(source: Source, params: Mapping[str, Any]) -> np.ndarray | None:
    """Rows per target (train partitions, then validation) when they are known before reading: a Parquet
    table's (or Delta version's) row counts are in its files' footers. None where they are not (a CSV, images,
    ``nan_policy: drop``, whose dropped rows move every later one) or a footer is unreadable (the read that
    follows names the file)."""
    table = source.table
    if source.fmt != "parquet" or table.nan_policy != "error":
        return None
    total = 0
    for file in source.files:
        try:
            total += source.footer(file).num_rows
        except TableError:
            return None
    partitions = params["num_train_files"]
    counts = np.zeros(partitions + 1, dtype=np.int64)
    for start in range(0, total, _BLOCK):
        rows = np.arange(start, min(total, start + _BLOCK), dtype=np.int64)
        counts += np.bincount(assign(rows, params["seed"], table.val_fraction, partitions), minlength=partitions + 1)
    return counts


# The empty partitions a message names before it counts the rest.
_NAMED = 5


def check_empty(table: parts.Table, empty: list[int], usable: int, partitions: int) -> None:
    """A TableError naming the partitions (``partitions``: validation) that no row goes to."""
    if empty and not usable:
        raise TableError(
            f"{table.path}: the table has no usable rows (none at all, or every one dropped by "
            "data.table.nan_policy: drop). HINT: point data.table.path at a table with rows (a Delta table: "
            "data.table.version at a version that has some)."
        )
    if empty:
        # At most a few named: 1,500 partitions of 1,797 rows made a 12 KB line that named every empty one.
        train = [t for t in empty if t != partitions]
        named = ["validation"] * (partitions in empty) + [f"train partition {t}" for t in train[:_NAMED]]
        more = f" and {len(train) - _NAMED} more of the {partitions} train partitions" if len(train) > _NAMED else ""
        which = ", ".join(named) + more
        # Each fix for its own partitions: a higher val_fraction leaves train partitions emptier still.
        fixes = ["lower data.num_train_files"] * bool(train) + ["raise data.table.val_fraction"] * (partitions in empty)
        raise TableError(
            f"{table.path}: {usable} usable rows leave {which} empty. "
            f"HINT: {', or '.join(fixes)}, or use a bigger table."
        )
