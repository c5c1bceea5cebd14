"""Written partitions leave the page cache once synced and hashed, but for the one training reads first: an
ingestion's files looked up with mincore(2), which says which of a file's mapped pages are in memory."""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
import os
import threading
import time
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pandas as pd
import pytest
import torch

from snakeddp.data import pagecache
from snakeddp.data.generate import write_dataset_manifest
from snakeddp.data.module import PartitionDataModule, Prefetcher
from snakeddp.data.partitions import read_partition
from snakeddp.data.table import ingest
from snakeddp.util.fsutil import read_json
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


class _Linear(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, _):
        features, labels = batch
        return torch.nn.functional.mse_loss(self.layer(features).squeeze(1), labels.float().view(-1))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _Residency(pl.Callback):
    """Each epoch's first step: the share of each train partition's pages in the cache, the next epoch's partition
    loaded first (it stays because it was prefetched, not because this test waited for it)."""

    def __init__(self, out: Path) -> None:
        self.out, self.seen = out, {}

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == 0:
            data = trainer.datamodule
            data.prefetcher._loaded[data.partition_for_epoch(trainer.current_epoch + 1)].result()
            self.seen[trainer.current_epoch] = [
                resident(self.out / "train" / f"part-{i:05d}.safetensors") for i in range(3)
            ]


@pytest.mark.parametrize("release_s", [0.0, 0.05])
def test_a_trained_partitions_pages_leave_the_page_cache_once_its_epoch_is_done(tmp_path, monkeypatch, release_s):
    """Training read every partition through the page cache of its memory cgroup and kept it there (bench 14: a
    failcnt of 25,516 at the limit); now the partition an epoch trained on is dropped, the next one stays.
    ``release_s``: a partition's release said that long before its end goes on to unmap its file, as a busy machine
    may leave it (the prefetching thread, which let go of files too, then dropped them while still mapped: every
    page stayed)."""
    if release_s:
        gone = pagecache.Readers._gone

        def slow_gone(readers: pagecache.Readers, path: Path) -> None:
            gone(readers, path)
            time.sleep(release_s)

        monkeypatch.setattr(pagecache.Readers, "_gone", slow_gone)
    source = table(tmp_path / "table") / "t.parquet"
    out = tmp_path / "out"
    ingest(params(source, partitions=3), out)
    train = [out / "train" / f"part-{i:05d}.json" for i in range(3)]
    write_dataset_manifest(out / "manifest-3.json", "t-0", params(source), train, out / "val.json")
    data = PartitionDataModule(out / "manifest-3.json", batch_size=256, seed=1)
    residency = _Residency(out)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=3,
        reload_dataloaders_every_n_epochs=1,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[residency],
    )
    trainer.fit(_Linear(), datamodule=data)
    trained, _, _ = residency.seen[1]
    assert trained == 0.0, "epoch 0's partition is gone from the cache once epoch 1 trains"
    assert min(residency.seen[1][1:]) > 0.9, "epoch 1's partition and epoch 2's, prefetched, stay"
    assert residency.seen[0][0] > 0.9, "partition 0 stays until epoch 0 is done (ingestion kept it for it)"
    dropped, trains, again = residency.seen[1][0], residency.seen[2][2], residency.seen[2][0]
    assert (residency.seen[2][1], trains) == (0.0, 1.0) and dropped == 0.0 and again > 0.9, (
        "epoch 3 trains partition 0 again: its pages, dropped after epoch 0, are read ahead as it is prefetched"
    )


def test_a_partition_moved_off_the_host_lets_go_of_its_files_pages_at_once(tmp_path):
    """A partition placed where it trains (a copy: on a CUDA device, data.device.resident) no longer reads its
    file: its pages leave the cache while it trains; one kept on the host as it was read keeps them."""
    source = table(tmp_path / "table") / "t.parquet"
    out = tmp_path / "out"
    ingest(params(source, partitions=3), out)
    entries = [read_json(out / "train" / f"part-{i:05d}.json") for i in range(3)]
    for entry in entries:
        entry["file"] = f"train/{entry['file']}"
    prefetcher = Prefetcher(out, entries)
    prefetcher.place = lambda p: dataclasses.replace(p, features=p.features.clone(), labels=p.labels.clone())
    moved, _ = prefetcher.get(1)
    prefetcher.place = lambda p: p
    kept, _ = prefetcher.get(2)
    assert resident(out / "train" / "part-00001.safetensors") == 0.0
    assert resident(out / "train" / "part-00002.safetensors") > 0.9
    assert torch.equal(moved.ids, read_partition(out / "train" / "part-00001.safetensors").ids)
    prefetcher.close()
    assert len(kept) > 0


def test_a_partition_that_ended_on_another_thread_is_dropped_by_the_next_let_go_or_at_once_on_its_own(tmp_path):
    """Its release is said before it unmaps its file (a weakref's callback): a drop from another thread could fall in
    between, so that thread's first let_go leaves it to the next, while the thread it ended on drops it at once."""
    source = table(tmp_path / "table") / "t.parquet"
    ingest(params(source, partitions=3), tmp_path / "out")
    first, second = (tmp_path / "out" / "train" / f"part-{i:05d}.safetensors" for i in range(2))
    readers = pagecache.Readers(lambda p: False)
    held = [read_partition(first)]
    readers.read(first, held[0])
    elsewhere = threading.Thread(target=held.clear)
    elsewhere.start()
    elsewhere.join()
    assert readers.let_go() == [] and resident(first) > 0.9, "ended on another thread: left to the next let_go"
    assert readers.let_go() == [first] and resident(first) == 0.0
    dropped: list[list[Path]] = []

    def end_and_let_go() -> None:
        partition = read_partition(second)
        readers.read(second, partition)
        del partition
        dropped.append(readers.let_go())

    own = threading.Thread(target=end_and_let_go)
    own.start()
    own.join()
    assert dropped == [[second]] and resident(second) == 0.0, "ended on the thread letting go: dropped at once"


def test_a_file_is_dropped_once_every_partition_read_from_it_is_gone_and_it_is_not_read_next(tmp_path):
    source = table(tmp_path / "table") / "t.parquet"
    ingest(params(source, partitions=3), tmp_path / "out")
    path = tmp_path / "out" / "train" / "part-00000.safetensors"
    wanted = {path}
    readers = pagecache.Readers(lambda p: p in wanted)
    first, second = read_partition(path), read_partition(path)
    readers.read(path, first)
    readers.read(path, second)
    del first
    assert readers.let_go() == [] and resident(path) > 0.9, "a partition of the file is still held"
    del second
    assert readers.let_go() == [] and resident(path) > 0.9, "the file is read next: it stays"
    wanted.clear()
    assert readers.let_go() == [], "let go of once: a file kept for the next epoch is released by its next reader"
    third = read_partition(path)
    readers.read(path, third)
    del third
    assert readers.let_go() == [path] and resident(path) == 0.0


def test_a_file_read_ahead_comes_into_the_page_cache_whole(tmp_path):
    """A partition training does not hash (handed over by ingestion) is read ahead as it is prefetched: all of
    it, where one advice over the whole file read only the device's read-ahead window (8 MB of a 147 MB
    partition here), and the step's gathers faulted the rest in page by page."""
    path = tmp_path / "part.safetensors"
    with open(path, "wb") as handle:
        handle.write(np.random.default_rng(0).bytes(32 << 20))
        handle.flush()
        os.fsync(handle.fileno())
    pagecache.drop(path)
    assert resident(path) == 0.0
    pagecache.read_ahead(path)
    deadline = time.monotonic() + 20
    while resident(path) < 1.0 and time.monotonic() < deadline:
        time.sleep(0.05)  # the advice only starts the reads
    assert resident(path) == 1.0
