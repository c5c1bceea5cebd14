"""Written partitions leave the page cache once synced and hashed, but for the one training reads first: an
ingestion's files looked up with mincore(2), which says which of a file's mapped pages are in memory."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from snakeddp.data import pagecache
from snakeddp.data.table import ingest
from tests.tables import params

PAGE = os.sysconf("SC_PAGE_SIZE")
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mmap.restype = ctypes.c_void_p
LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def resident(path: Path, start: int = 0, stop: int | None = None) -> float:
    """The share of a file's pages (those wholly within [start, stop)) in the page cache (mapping reads none)."""
    size = path.stat().st_size
    pages = (size + PAGE - 1) // PAGE
    fd = os.open(path, os.O_RDONLY)
    try:
        address = LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            vector = (ctypes.c_ubyte * pages)()
            if LIBC.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            inside = vector[-(-start // PAGE) : (size if stop is None else stop) // PAGE]
            return sum(v & 1 for v in inside) / len(inside)
        finally:
            LIBC.munmap(address, size)
    finally:
        os.close(fd)


def table(folder: Path, rows: int = 20_000) -> Path:
    """A table of 3 float features and a 0/1 label (a few MB of partitions: many pages each), on disk (synced:
    its pages in the cache are clean, as a table's that was not just written)."""
    rng = np.random.default_rng(4)
    data = pd.DataFrame({name: rng.standard_normal(rows).astype(np.float32) for name in ("a", "b", "c")})
    data["y"] = (data["a"] > 0).astype(int)
    folder.mkdir()
    data.to_parquet(folder / "t.parquet")
    data.to_csv(folder / "t.csv", index=False)
    for name in ("t.parquet", "t.csv"):
        with open(folder / name, "rb+") as handle:
            os.fsync(handle.fileno())
    return folder


@pytest.mark.parametrize("fmt", ["parquet", "csv"], ids=["written in place", "written through the spill"])
def test_an_ingestions_partitions_leave_the_page_cache_but_the_first_one_training_reads(tmp_path, fmt):
    source = table(tmp_path / "table") / f"t.{fmt}"
    ingest(params(source, partitions=3), tmp_path / "out")
    out = tmp_path / "out"
    kept = resident(out / "train" / "part-00000.safetensors")
    dropped = {
        name: resident(out / name)
        for name in ("train/part-00001.safetensors", "train/part-00002.safetensors", "val.safetensors")
    }
    assert kept > 0.9, "partition 0, which epoch 1 trains on, stays in the page cache"
    assert dropped == dict.fromkeys(dropped, 0.0), "the others are on disk only"
    pagecache.drop(out / "train" / "part-00000.safetensors")
    assert resident(out / "train" / "part-00000.safetensors") == 0.0, "the check itself sees a dropped file"


def test_only_epoch_ones_partition_is_the_one_read_next():
    assert pagecache.read_next({"split": "train", "index": "0"})
    assert not pagecache.read_next({"split": "train", "index": "1"})
    assert not pagecache.read_next({"split": "val", "index": "0"})


def test_a_parquet_tables_row_groups_leave_the_page_cache_once_read(tmp_path):
    """Read once, a local Parquet file's row groups are dropped from the cache behind the reader (its footer,
    read first, may stay): a 6 GB table no longer passes through a 3 GB cgroup by reclaim."""
    import pyarrow.parquet as pq

    source = table(tmp_path / "table", rows=200_000) / "t.parquet"
    with open(source, "rb") as handle:  # the whole file in the cache first, as a table just read by a hash is
        while handle.read(1 << 20):
            pass
    assert resident(source) == 1.0
    groups = pq.ParquetFile(source).metadata  # before: reading a footer reads the file's last 64 KB again
    ingest(params(source, partitions=3), tmp_path / "out")
    columns = [groups.row_group(g).column(c) for g in range(groups.num_row_groups) for c in range(groups.num_columns)]
    starts = [c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in columns]
    stop = max(first + c.total_compressed_size for first, c in zip(starts, columns, strict=True))
    assert (stop - min(starts)) > 0.9 * source.stat().st_size, "the row groups are most of the file"
    assert resident(source, min(starts), stop) == 0.0


def test_advice_on_a_file_that_is_gone_is_no_error_of_the_run(tmp_path):
    assert pagecache.drop(tmp_path / "gone.safetensors") is None
    assert not (tmp_path / "gone.safetensors").exists()
