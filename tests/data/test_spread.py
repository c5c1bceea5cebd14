"""snakeddp.data.spread without a cluster (its workers in this process): the partitions assembled from pieces
are a local ingestion's bytes, whatever the windows and partitions (fewer windows than partitions and more),
for a multiclass table with a category column as well as a binary one; tables a local ingestion does not
split by windows are left to it (None)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from snakeddp.data import spread
from snakeddp.data.table import ingest
from tests import tables
from tests.spread_tables import parquet_folder, same_files, the_rows


def categories(rows: int = 700_000) -> pa.Table:
    """Numbers, a category column and a 3-class label."""
    rng = np.random.default_rng(3)
    return pa.table({
        "a": rng.standard_normal(rows),
        "b": rng.standard_normal(rows).astype(np.float32),
        "colour": pa.array(rng.choice(["red", "green", "blue"], rows)).dictionary_encode(),
        "y": rng.integers(0, 3, rows),
    })  # fmt: skip


@pytest.mark.parametrize("partitions", [2, 5])
def test_assembled_pieces_are_a_local_ingestions_bytes(tmp_path, partitions):
    table = parquet_folder(tmp_path / "table", the_rows())
    params = tables.params(table, partitions=partitions)
    ingest(params, tmp_path / "local")
    summary = spread.ingest(params, tmp_path / "spread", spread.in_this_process, "here")
    assert summary["pieces"] == 2 and summary["rows_read"] == 600_000
    assert len(same_files(tmp_path / "local", tmp_path / "spread")) == 2 * (partitions + 1)


def test_a_multiclass_table_with_a_category_column(tmp_path):
    table = parquet_folder(tmp_path / "table", categories())
    params = tables.params(table, partitions=4, classes=3, features=["a", "b", "colour"])
    ingest(params, tmp_path / "local")
    summary = spread.ingest(params, tmp_path / "spread", spread.in_this_process, "here")
    assert summary["pieces"] == 2 and summary["task"]["num_classes"] == 3
    assert [c["vocabulary"] for c in summary["task"]["inputs"] if c["kind"] == "category"] == [["blue", "green", "red"]]
    assert len(same_files(tmp_path / "local", tmp_path / "spread")) == 2 * (4 + 1)


def test_tables_a_local_ingestion_reads_whole_are_left_to_it(tmp_path):
    small = tmp_path / "small.parquet"
    pq.write_table(pa.Table.from_pandas(tables.frame(1000), preserve_index=False), small)
    assert spread.ingest(tables.params(small), tmp_path / "a", spread.in_this_process, "here") is None
    big = parquet_folder(tmp_path / "big", the_rows())
    dropping = tables.params(big, nan_policy="drop")
    assert spread.ingest(dropping, tmp_path / "b", spread.in_this_process, "here") is None
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
