"""Tables for the tests of ingestion on a cluster's workers (snakeddp.data.spread: tests/spark/test_spread_ingest.py,
tests/slurm/test_slurm_ingest.py): a Parquet folder and a Delta table of two windows, and the check that two
ingestions wrote the same bytes."""

from __future__ import annotations

import filecmp
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from snakeddp.data.table import ingest
from snakeddp.errors import TableError
from tests import tables

# Two windows of the windowed split (data.split.WINDOW_ROWS rows at least each): two pieces, two tasks.
ROWS = 600_000


def parquet_folder(folder: Path, rows: pa.Table) -> Path:
    """Three files of row groups of 50,000 rows: a window (in its seeded order) takes groups of several files."""
    folder.mkdir(parents=True)
    for number, part in enumerate(np.array_split(np.arange(rows.num_rows), 3)):
        pq.write_table(rows.take(part), folder / f"part-{number}.parquet", row_group_size=50_000)
    return folder


def delta_table(folder: Path, rows: pa.Table) -> Path:
    """Two commits of delta-rs (one data file each)."""
    half = rows.num_rows // 2
    write_deltalake(str(folder), rows.slice(0, half))
    write_deltalake(str(folder), rows.slice(half), mode="append")
    return folder


def the_rows(seed: int = 0) -> pa.Table:
    return pa.Table.from_pandas(tables.frame(ROWS, seed), preserve_index=False)


def same_files(left: Path, right: Path) -> list[str]:
    """The names of the partition files and entries, after checking each is the same bytes in both folders."""
    names = sorted(p.relative_to(left).as_posix() for p in left.rglob("*") if p.suffix in (".safetensors", ".json"))
    # Not the step's log (ingest.json: times, readers) nor this machine's stamps, in the folder or a dataset's, nor
    # what a job keeps for the other job of its dataset (.vocabularies.json: snakeddp.data.layout).
    names = [n for n in names if Path(n).name not in ("ingest.json", "written.json") and not n.startswith(".")]
    assert names and all(filecmp.cmp(left / n, right / n, shallow=False) for n in names), names
    return names


def bad_value_table(tmp_path: Path) -> tuple[dict, pytest.ExceptionInfo[TableError]]:
    """The ingestion parameters of a table with a NaN in its third file (rows 400,000 on, its 124th row), and the
    one line a local ingestion of it stops with."""
    rows = the_rows().to_pandas()
    rows.loc[400_123, "b"] = np.nan
    table = parquet_folder(tmp_path / "table", pa.Table.from_pandas(rows, preserve_index=False))
    params = tables.params(table, partitions=3)
    with pytest.raises(TableError) as local:
        ingest(params, tmp_path / "local")
    return params, local


def bad_value_said_as_locally(tmp_path: Path, spread: Callable[[dict, Path], object]) -> None:
    """bad_value_table read by a cluster's worker: ``spread`` (the ingestion on the cluster, given the parameters
    and its output folder) stops with the local ingestion's one line, and publishes no partition."""
    params, local = bad_value_table(tmp_path)
    with pytest.raises(TableError) as spread_error:
        spread(params, tmp_path / "spread")
    assert str(spread_error.value) == str(local.value)
    assert "part-2.parquet: column 'b', row 124: missing or non-finite value. HINT:" in str(local.value)
    assert not list((tmp_path / "spread").rglob("*.safetensors"))
