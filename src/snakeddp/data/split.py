"""Which partition each row of a table goes to, and how many rows each gets.

A row is dealt to validation or one of the P train partitions by a seeded hash of its row number alone, so
the split does not depend on chunk sizes, file boundaries or the machine. Where a table's row count is known
before it is read (a Parquet table's or a Delta version's files' footers hold it), so is every partition's
size (``known_counts``), and the partitions can be written in place as the rows arrive (snakeddp.data.inplace).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from snakeddp.config import parts
from snakeddp.data.source import Source
from snakeddp.errors import TableError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# Row numbers hashed at a time while counting: memory stays small whatever the table's size.
_BLOCK = 1 << 20


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


def check_empty(table: parts.Table, empty: list[int], usable: int, partitions: int) -> None:
    """A TableError naming the partitions (``partitions``: validation) that no row goes to."""
    if empty:
        which = ", ".join("validation" if t == partitions else f"train partition {t}" for t in empty)
        raise TableError(
            f"{table.path}: {usable} usable rows leave {which} empty. "
            "HINT: lower data.num_train_files, raise data.table.val_fraction, or use a bigger table."
        )
