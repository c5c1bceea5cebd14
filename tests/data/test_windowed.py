"""The windowed split's ingestion: a Parquet table's row groups read window by window in a seeded order, each
train partition published (file in place, checksum, entry) as soon as the last window feeding it is read; the
global split's promises (every row once, with its values and row number; the same bytes every time, whatever
the chunk size) held by it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from snakeddp.data import split, windowed
from snakeddp.data.identity import fingerprint
from snakeddp.data.partitions import read_partition, verify_file
from snakeddp.data.split import assign
from snakeddp.data.table import TableError, ingest
from tests.data.test_table import files_of
from tests.tables import frame, params

PARTS = 3


def folder_of(tmp_path: Path, rows: int = 6000, group: int = 250, seed: int = 0) -> Path:
    """A Parquet folder of two files, in row groups of ``group`` rows."""
    data = frame(rows=rows, seed=seed)
    folder = tmp_path / "pq"
    folder.mkdir(exist_ok=True)
    cut = rows * 2 // 3
    data.iloc[:cut].to_parquet(folder / "part-0.parquet", row_group_size=group)
    data.iloc[cut:].to_parquet(folder / "part-1.parquet", row_group_size=group)
    return folder


def loaded(directory: Path, name: str):
    return read_partition(directory / f"{name}.safetensors", json.loads((directory / f"{name}.json").read_text()))


@pytest.fixture
def small_windows(monkeypatch):
    """Windows of 1,000 rows, so a table of a few thousand rows is split by windows."""
    monkeypatch.setattr(split, "WINDOW_ROWS", 1000)


def test_every_row_lands_once_with_its_values_and_its_partition_is_one_its_window_feeds(tmp_path, small_windows):
    folder = folder_of(tmp_path)
    data = frame(rows=6000)
    summary = ingest(params(folder, partitions=PARTS), tmp_path / "out")
    assert summary["rows_read"] == 6000 and summary["records"]["train"] + summary["records"]["val"] == 6000
    assert summary["split"] == {"windows": 6, "window_rows": 1000}
    ids = []
    for name in [*(f"train/part-{t:05d}" for t in range(PARTS)), "val"]:
        part = loaded(tmp_path / "out", name)
        got = part.ids.numpy()
        assert np.array_equal(part.features.numpy()[:, 2], data["c"].to_numpy(np.float32)[got])
        assert np.array_equal(part.labels.numpy()[:, 0], data["y"].to_numpy(np.float32)[got])
        ids.append(got)
    everything = np.concatenate(ids)
    assert np.array_equal(np.sort(everything), np.arange(6000)), "every row exactly once"
    # Validation is the global split's validation: the same hash, below the same fraction.
    assert np.array_equal(np.sort(ids[-1]), np.flatnonzero(assign(np.arange(6000), 5, 0.2, PARTS) == PARTS))
    # Train partition 0 holds rows of its windows alone, in the order they were read: not the global split's.
    sizes = [pq.ParquetFile(f).metadata for f in sorted(folder.iterdir())]
    groups = split.row_groups([[m.row_group(g).num_rows for g in range(m.num_row_groups)] for m in sizes])
    windows = split.windows(groups, 5, PARTS, 1000)
    feeding = [w for w in windows if 0 in w.span]
    order = np.concatenate([w.row_numbers() for w in feeding])
    dealt = np.concatenate([split.deal(w, w.row_numbers(), 5, 0.2, PARTS) for w in feeding])
    assert np.array_equal(ids[0], order[dealt == 0])
    assert not np.array_equal(np.sort(ids[0]), np.flatnonzero(assign(np.arange(6000), 5, 0.2, PARTS) == 0))


def test_two_ingestions_give_the_same_bytes_whatever_the_chunk_size(tmp_path, small_windows):
    folder = folder_of(tmp_path)
    ingest(params(folder, partitions=PARTS), tmp_path / "first")
    ingest(params(folder, partitions=PARTS), tmp_path / "second")
    ingest(params(folder, partitions=PARTS), tmp_path / "small-chunks", chunk_rows=37)
    first = files_of(tmp_path / "first")
    assert first == files_of(tmp_path / "second") == files_of(tmp_path / "small-chunks")
    assert not [p for p in (tmp_path / "first").rglob(".*")], "no partial file left"
    other_seed = params(folder, partitions=PARTS)
    other_seed["seed"] = 6
    ingest(other_seed, tmp_path / "seed-6")
    assert files_of(tmp_path / "seed-6")["train/part-00000.safetensors"] != first["train/part-00000.safetensors"]


def test_a_partition_is_published_complete_while_later_windows_are_still_to_read(tmp_path, small_windows, monkeypatch):
    """At the start of each window, every entry already written names a complete file that verifies against it,
    and partition 0's is written before the last window is read."""
    folder = folder_of(tmp_path)
    out = tmp_path / "out"
    seen: list[list[str]] = []
    real = windowed.Published.begin

    def begin(self, window):
        published = sorted(p.name for p in (out / "train").glob("*.json"))
        for name in published:
            entry = json.loads((out / "train" / name).read_text())
            verify_file(out / "train" / entry["file"], entry)
        seen.append(published)
        real(self, window)

    monkeypatch.setattr(windowed.Published, "begin", begin)
    ingest(params(folder, partitions=PARTS), out)
    assert len(seen) >= PARTS and seen[0] == [], "nothing is published before the first window is read"
    assert "part-00000.json" in seen[-1], "partition 0 is published before the last window is read"
    assert seen == sorted(seen, key=len), "published partitions stay published"


def test_a_bad_value_in_a_later_window_names_its_file_and_row_and_leaves_no_partial_file(tmp_path, small_windows):
    data = frame(rows=6000)
    data.loc[5500, "b"] = np.nan
    folder = tmp_path / "pq"
    folder.mkdir()
    data.to_parquet(folder / "part-0.parquet", row_group_size=250)
    with pytest.raises(TableError, match=r"part-0\.parquet: column 'b', row 5501: missing or non-finite value"):
        ingest(params(folder, partitions=PARTS), tmp_path / "out")
    assert not [p for p in (tmp_path / "out").rglob(".*")], "no partial file left"


def test_a_table_of_at_least_one_real_window_is_split_by_windows_and_a_smaller_one_globally(tmp_path):
    """The real WINDOW_ROWS (2^18): a table of 300,000 rows in row groups of 50,000 is one window (the rest of
    under a window joins it); one of 200,000 rows keeps the global split."""
    rows = 300_000
    folder = tmp_path / "big"
    folder.mkdir()
    x = np.arange(rows, dtype=np.float32)
    pq.write_table(pa.table({"a": x, "b": -x, "c": x * 2, "y": (x % 2)}), folder / "t.parquet", row_group_size=50_000)
    ingest(params(folder, partitions=PARTS), tmp_path / "out")
    part = loaded(tmp_path / "out", "train/part-00000")
    ids = part.ids.numpy()
    assert np.array_equal(part.features.numpy()[:, 0], ids.astype(np.float32)), "each row with its own values"
    assert not np.all(np.diff(ids) > 0), "read in the windows' seeded order of row groups, not the file's"
    small = tmp_path / "small"
    small.mkdir()
    pq.write_table(
        pa.table({"a": x[:200_000], "b": x[:200_000], "c": x[:200_000], "y": x[:200_000] % 2}),
        small / "t.parquet",
        row_group_size=50_000,
    )
    ingest(params(small, partitions=PARTS), tmp_path / "global")
    ids = loaded(tmp_path / "global", "train/part-00000").ids.numpy()
    assert np.array_equal(ids, np.flatnonzero(assign(np.arange(200_000), 5, 0.2, PARTS) == 0))


def test_one_value_changed_in_one_file_changes_the_identity_and_a_pinned_one_refuses_it_leaving_nothing(
    tmp_path, small_windows
):
    """One value of one file, the file's size and mtime kept: the table's identity changes, and an ingestion
    pinned to the old one stops once the file is read, removing the partitions it had published."""
    folder = tmp_path / "pq"
    folder.mkdir()
    data = frame(rows=6000)
    write = lambda d, name: pq.write_table(  # noqa: E731
        pa.Table.from_pandas(d, preserve_index=False), folder / name, row_group_size=250, compression="none",
        use_dictionary=False, write_statistics=False,
    )  # fmt: skip
    write(data.iloc[:3000], "part-0.parquet")
    write(data.iloc[3000:], "part-1.parquet")
    planned = fingerprint(folder)
    checked = params(folder, partitions=PARTS, sha256=planned)
    ingest(checked, tmp_path / "checked")
    ingest(params(folder, partitions=PARTS), tmp_path / "unchecked")
    assert files_of(tmp_path / "checked") == files_of(tmp_path / "unchecked")
    before = (folder / "part-1.parquet").stat()
    changed = data.iloc[3000:].copy()
    changed.iloc[1234, changed.columns.get_loc("b")] += 1.0
    write(changed, "part-1.parquet")
    os.utime(folder / "part-1.parquet", ns=(before.st_atime_ns, before.st_mtime_ns))
    after = (folder / "part-1.parquet").stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert fingerprint(folder) != planned
    with pytest.raises(TableError, match=r"the table's checksum differs from data.table.sha256.*HINT: restore"):
        ingest(checked, tmp_path / "out")
    assert not list((tmp_path / "out").rglob("*.safetensors")), "no partition of a refused table is left"
    assert not list((tmp_path / "out").rglob("part-*.json")) and not list((tmp_path / "out").rglob(".*"))
