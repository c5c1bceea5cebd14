"""snakeddp.data.spread without a cluster (its workers in this process): the partitions assembled from pieces
are a local ingestion's bytes, whatever the windows and partitions (fewer windows than partitions and more),
for a multiclass table with a category column as well as a binary one; a partition is published as soon as
the pieces that feed it are read, and removed where the ingestion stops later; an ingestion killed outright
leaves its pieces inside train/ (the data_table rule's directory output, which Snakemake removes), a finished
one leaves none; tables a local ingestion does not split by windows are left to it (None)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from snakeddp.data import spread
from snakeddp.data.table import ingest
from snakeddp.errors import TableError
from tests import tables
from tests.helpers import subprocess_env
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
    local = json.loads((tmp_path / "local" / "ingest.json").read_text())
    assert summary["split"] == local["split"] == {"windows": 2, "window_rows": 1 << 18}
    assert len(same_files(tmp_path / "local", tmp_path / "spread")) == 2 * (partitions + 1)
    # Nothing in train/ but the partitions and their entries (the pieces were there): the local ingestion's names.
    assert sorted(os.listdir(tmp_path / "spread" / "train")) == sorted(os.listdir(tmp_path / "local" / "train"))


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


def test_a_partition_is_published_once_the_pieces_that_feed_it_are_read(tmp_path):
    table = parquet_folder(tmp_path / "table", the_rows())
    params = tables.params(table, partitions=2)  # two windows, side by side: the first feeds partition 0 alone
    published = []

    def one_by_one(work, pieces, done):
        for piece in pieces:
            done(spread.read_piece(work, piece))
            published.append(sorted(p.name for p in (tmp_path / "spread").rglob("*.json")))

    spread.ingest(params, tmp_path / "spread", one_by_one, "here")
    assert published == [["part-00000.json"], ["part-00000.json", "part-00001.json", "val.json"]]


def test_an_ingestion_that_stops_removes_what_it_published(tmp_path):
    rows, path = the_rows().to_pandas(), tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), path, row_group_size=50_000)
    params = tables.params(path, partitions=2)
    _, pieces = spread.prepare(params, tmp_path / "spread")
    rows.loc[pieces[-1].groups[0].first_row, "a"] = np.nan  # in the last window read: after partition 0's
    pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), path, row_group_size=50_000)
    published = []

    def one_by_one(work, pieces, done):
        for piece in pieces:
            done(spread.read_piece(work, piece))
            published.append(sorted(p.name for p in (tmp_path / "spread").rglob("*.json")))

    with pytest.raises(TableError, match="column 'a', row .*: missing or non-finite value"):
        spread.ingest(params, tmp_path / "spread", one_by_one, "here")
    assert published == [["part-00000.json"]]
    assert not list((tmp_path / "spread").rglob("*.safetensors")) and not list((tmp_path / "spread").rglob("*.json"))


# A spread ingestion killed outright (SIGKILL: no finally runs, as for a step killed by Slurm or the OOM killer):
# once its first piece is read and partition 0 published, or as it syncs the validation set it is writing.
KILLED = """
import json, os, signal, sys
from snakeddp.data import spread

def killed_after_the_first(work, pieces, done):
    done(spread.read_piece(work, pieces[0]))
    os.kill(os.getpid(), signal.SIGKILL)

synced = os.fsync
def killed_writing_validation(fd):
    if os.readlink(f"/proc/self/fd/{fd}").endswith("/.val.safetensors.partial"):
        os.kill(os.getpid(), signal.SIGKILL)
    synced(fd)

params, out, when = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
if when == "validation":
    os.fsync = killed_writing_validation
spread.ingest(params, out, killed_after_the_first if when == "first" else spread.in_this_process, "here")
"""


@pytest.mark.parametrize("when", ["first", "validation"])
def test_a_killed_ingestion_leaves_nothing_outside_the_rules_outputs(tmp_path, when):
    table = parquet_folder(tmp_path / "table", the_rows())
    params = tables.params(table, partitions=2)
    out = tmp_path / "spread"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED, json.dumps(params), str(out), when], env=subprocess_env(), capture_output=True
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    # data_table's outputs: train/ (a directory), val.safetensors, val.json and ingest.json. What the ingestion
    # had begun is in train/, beside the partitions it published: Snakemake removes the folder as a failed (or,
    # before its rerun, killed) job's.
    assert sorted(os.listdir(out)) == ["train"]
    begun = {spread.PIECES, "part-00000.json", *([".val.safetensors.partial"] if when == "validation" else [])}
    assert begun <= set(os.listdir(out / "train"))
    shutil.rmtree(out / "train")
    summary = spread.ingest(params, out, spread.in_this_process, "here")  # the rerun
    assert summary["pieces"] == 2
    ingest(params, tmp_path / "local")
    assert len(same_files(tmp_path / "local", out)) == 2 * (2 + 1)
    assert sorted(os.listdir(out / "train")) == sorted(os.listdir(tmp_path / "local" / "train"))
