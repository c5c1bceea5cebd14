"""Table ingestion: streaming, deterministic split, byte-identical partitions, errors that name file, column and row;
partition columns of folders in hive layout, as Spark, pyarrow and pandas write them."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from snakeddp.data import partitions, table
from snakeddp.data.identity import fingerprint
from snakeddp.data.partitions import DataIntegrityError, read_partition, serialize
from snakeddp.data.table import TableError, ingest
from tests.tables import FEATURES, frame, params

PARTS = ["val", *(f"train/part-{i:05d}" for i in range(3))]


def files_of(directory: Path) -> dict[str, bytes]:
    """Every file's bytes, but the stat stamps of an ingestion's own files (which no two ingestions share)."""
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != table.WRITTEN
    }


def loaded(directory: Path, name: str):
    entry = json.loads((directory / f"{name}.json").read_text())
    return read_partition(directory / f"{name}.safetensors", entry)


def test_same_table_twice_gives_byte_identical_partitions_whatever_the_chunk_size(tmp_path):
    path = tmp_path / "t.csv"
    frame().to_csv(path, index=False)
    ingest(params(path), tmp_path / "first")
    ingest(params(path), tmp_path / "second")
    ingest(params(path), tmp_path / "small-chunks", chunk_rows=7)
    first = files_of(tmp_path / "first")
    assert sorted(first) == sorted(
        ["ingest.json", "val.json", "val.safetensors"]
        + [f"train/part-{i:05d}.{ext}" for i in range(3) for ext in ("json", "safetensors")]
    ), "partitions, entries and the summary; the spill file is gone"
    assert first == files_of(tmp_path / "second") == files_of(tmp_path / "small-chunks")


def test_every_row_lands_once_with_its_values_and_row_number_as_id(tmp_path):
    data = frame(rows=1000)
    path = tmp_path / "t.csv"
    data.to_csv(path, index=False)
    summary = ingest(params(path, partitions=4), tmp_path / "out")
    parts = [loaded(tmp_path / "out", f"train/part-{i:05d}") for i in range(4)] + [loaded(tmp_path / "out", "val")]
    ids = np.concatenate([p.ids.numpy() for p in parts])
    assert sorted(ids.tolist()) == list(range(1000)), "each row in exactly one partition or in val"
    val = parts[-1]
    assert 0.15 < len(val) / 1000 < 0.25, f"val_fraction 0.2, got {len(val)} rows"
    assert summary["records"] == {"train": 1000 - len(val), "val": len(val)}
    for part in parts:
        rows = data.iloc[part.ids.numpy()]
        assert np.array_equal(part.features.numpy(), rows[FEATURES].to_numpy(dtype=np.float32))
        assert np.array_equal(part.labels.numpy()[:, 0], rows["y"].to_numpy(dtype=np.float32))
        assert part.labels.shape == (len(part), 1), "binary labels as [n, 1] float32, like synthetic data"
        assert list(part.ids.numpy()) == sorted(part.ids.numpy()), "rows keep table order in a partition"


def test_parquet_folder_reads_files_in_name_order_and_matches_the_csv(tmp_path):
    data = frame(rows=600)
    # Values exact in float32, so CSV text and Parquet binary give the same bits.
    data[FEATURES] = (data[FEATURES] * 8).round() / 8
    (tmp_path / "pq").mkdir()
    data.iloc[300:].to_parquet(tmp_path / "pq" / "part-1.parquet")
    data.iloc[:300].to_parquet(tmp_path / "pq" / "part-0.parquet")
    (tmp_path / "pq" / "_SUCCESS").write_text("")
    data.to_csv(tmp_path / "t.csv", index=False)
    summary = ingest(params(tmp_path / "pq"), tmp_path / "from-parquet")
    ingest(params(tmp_path / "t.csv"), tmp_path / "from-csv")
    assert [Path(f["file"]).name for f in summary["files"]] == ["part-0.parquet", "part-1.parquet"]
    assert summary["format"] == "parquet"
    parquet, csv = files_of(tmp_path / "from-parquet"), files_of(tmp_path / "from-csv")
    assert {k: v for k, v in parquet.items() if k != "ingest.json"} == {
        k: v for k, v in csv.items() if k != "ingest.json"
    }


def test_multiclass_labels_are_int64_class_indices(tmp_path):
    data = frame()
    data["y"] = (data["a"] > 0).astype(int) + (data["b"] > 0).astype(int)
    data.to_csv(tmp_path / "t.csv", index=False)
    ingest(params(tmp_path / "t.csv", classes=3), tmp_path / "out")
    part = loaded(tmp_path / "out", "val")
    assert part.labels.dtype.is_floating_point is False and part.labels.shape == (len(part),)
    assert np.array_equal(part.labels.numpy(), data["y"].to_numpy()[part.ids.numpy()])


def test_streamed_file_equals_the_in_memory_encoding(tmp_path):
    data = frame(rows=50)
    data.to_csv(tmp_path / "t.csv", index=False)
    ingest(params(tmp_path / "t.csv", partitions=1), tmp_path / "out", chunk_rows=4)
    part = loaded(tmp_path / "out", "train/part-00000")
    tensors = {"features": part.features.numpy(), "labels": part.labels.numpy(), "ids": part.ids.numpy()}
    metadata = {"generator": table.GENERATOR, "split": "train", "index": "0"}
    assert (tmp_path / "out" / "train" / "part-00000.safetensors").read_bytes() == serialize(tensors, metadata)


@pytest.mark.parametrize(
    ("cell", "column", "message"),
    [
        ("abc", "b", "'abc' is not a number"),
        ("", "c", "missing or non-finite value"),
        ("inf", "a", "missing or non-finite value"),
    ],
)
def test_bad_values_are_named_by_file_column_and_row(tmp_path, cell, column, message):
    data = frame(rows=50).astype({column: object})
    data.loc[17, column] = cell
    path = tmp_path / "t.csv"
    data.to_csv(path, index=False)
    with pytest.raises(TableError) as error:
        ingest(params(path), tmp_path / "out", chunk_rows=10)
    text = str(error.value)
    assert str(path) in text and f"column {column!r}" in text and "row 18 (line 19)" in text and message in text


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_label_column_of_text_says_to_encode_it_and_the_encoded_label_ingests(tmp_path, kind):
    """A text label's HINT was a text feature's, `categories: [label]`, which cannot make a label a number."""
    data = frame(rows=60)
    data["y"] = np.where(data["y"] == 1, "cat", "dog")
    path = tmp_path / f"t.{kind}"
    data.to_csv(path, index=False) if kind == "csv" else data.to_parquet(path)
    with pytest.raises(TableError) as refused:
        ingest(params(path), tmp_path / "out")
    said = str(refused.value)
    assert "column 'y', row 1" in said and "is not a number, and the label column holds class indices" in said
    assert "HINT: encode the label where the table is written (pandas: df['y'] = df['y'].astype('category')" in said
    assert "categories" not in said.partition("HINT:")[2].replace("astype('category')", ""), said
    data["y"] = data["y"].astype("category").cat.codes  # the HINT, as it says it
    data.to_csv(path, index=False) if kind == "csv" else data.to_parquet(path)
    assert ingest(params(path), tmp_path / "out")["rows_read"] == 60


def test_too_many_partitions_for_the_rows_names_a_few_empty_ones_and_the_lower_count_ingests(tmp_path):
    """1,500 partitions of the 1,797 digits made a 12 KB line naming every empty partition."""
    frame(rows=60).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(TableError) as refused:
        ingest(params(tmp_path / "t.csv", partitions=200), tmp_path / "out")
    said = str(refused.value)
    assert "60 usable rows leave train partition " in said and "HINT: lower data.num_train_files" in said, said
    assert said.count("train partition ") == 5 and " more of the 200 train partitions empty. HINT" in said, said
    assert len(said) < 400 and "val_fraction" not in said, "a higher val_fraction empties train partitions more"
    assert ingest(params(tmp_path / "t.csv", partitions=3), tmp_path / "out")["rows_read"] == 60


def test_nan_policy_drop_skips_rows_and_keeps_the_others_ids(tmp_path):
    data = frame(rows=60)
    data.loc[[3, 40], "b"] = np.nan
    data.to_csv(tmp_path / "t.csv", index=False)
    summary = ingest(params(tmp_path / "t.csv", nan_policy="drop"), tmp_path / "out")
    ids = np.concatenate(
        [loaded(tmp_path / "out", n).ids.numpy() for n in ("val", *(f"train/part-{i:05d}" for i in range(3)))]
    )
    assert summary["rows_dropped"] == 2 and sorted(ids.tolist()) == [i for i in range(60) if i not in (3, 40)]


def test_missing_column_names_the_file_and_the_column(tmp_path):
    path = tmp_path / "t.csv"
    frame().drop(columns=["c"]).to_csv(path, index=False)
    with pytest.raises(TableError, match=r"t\.csv: no column 'c' \(the file has: a, b, note, y\).*HINT: fix"):
        ingest(params(path), tmp_path / "out")
    fixed = params(path)
    fixed["table"]["features"] = ["a", "b"]  # the HINT: fix data.table.features
    assert ingest(fixed, tmp_path / "out")["rows_read"] == 400


def test_missing_column_in_one_parquet_file_of_a_folder(tmp_path):
    (tmp_path / "pq").mkdir()
    frame().to_parquet(tmp_path / "pq" / "a.parquet")
    frame().drop(columns=["y"]).to_parquet(tmp_path / "pq" / "b.parquet")
    with pytest.raises(TableError, match=r"b\.parquet: no column 'y'"):
        ingest(params(tmp_path / "pq"), tmp_path / "out")


@pytest.mark.parametrize(("content", "message"), [("", r"empty \(0 bytes\)"), ("a,b,c,y\n", "has no rows")])
def test_empty_files_are_refused_by_name(tmp_path, content, message):
    (tmp_path / "tbl").mkdir()
    frame().to_csv(tmp_path / "tbl" / "a.csv", index=False)
    (tmp_path / "tbl" / "b.csv").write_text(content)
    with pytest.raises(TableError, match=rf"b\.csv: the file .*{message}.*HINT: remove it"):
        ingest(params(tmp_path / "tbl"), tmp_path / "out")
    (tmp_path / "tbl" / "b.csv").unlink()
    assert ingest(params(tmp_path / "tbl"), tmp_path / "out")["rows_read"] == 400


def test_a_damaged_parquet_file_is_one_line_naming_it_with_a_hint(tmp_path):
    """It was the one error of a table's ingestion with no HINT: a line of pyarrow's words alone."""
    (tmp_path / "pq").mkdir()
    frame().to_parquet(tmp_path / "pq" / "a.parquet")
    (tmp_path / "pq" / "b.parquet").write_bytes(b"PAR1" + b"cut short" + b"PAR1")
    with pytest.raises(TableError, match=r"b\.parquet: not a readable Parquet file \(.*\)\. HINT: .*write it again"):
        ingest(params(tmp_path / "pq"), tmp_path / "out")


@pytest.mark.parametrize(
    ("classes", "label", "rule"), [(1, 2, "0 or 1"), (3, 3, "an integer in 0..2"), (3, 1.5, "an integer in 0..2")]
)
def test_labels_outside_the_task_are_named(tmp_path, classes, label, rule):
    data = frame(rows=30)
    data["y"] = data["y"].astype(float)
    data.loc[11, "y"] = label
    data.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(TableError, match=rf"column 'y', row 12 \(line 13\): label .* is not {rule}.*HINT: fix"):
        ingest(params(tmp_path / "t.csv", classes=classes), tmp_path / "out")
    data.loc[11, "y"] = 0  # the HINT: fix the label column
    data.to_csv(tmp_path / "t.csv", index=False)
    assert ingest(params(tmp_path / "t.csv", classes=classes), tmp_path / "out")["rows_read"] == 30


def test_too_small_a_table_for_the_partitions_is_refused(tmp_path):
    frame(rows=3).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(TableError, match="empty. HINT: lower data.num_train_files.*or use a bigger table"):
        ingest(params(tmp_path / "t.csv", partitions=8), tmp_path / "out")
    frame(rows=400).to_csv(tmp_path / "t.csv", index=False)
    assert ingest(params(tmp_path / "t.csv", partitions=8), tmp_path / "out")["rows_read"] == 400


def test_a_table_without_rows_is_named_so_not_sent_to_fewer_partitions(tmp_path):
    frame(rows=0).to_parquet(tmp_path / "t.parquet")
    for count in (3, 1):  # fewer partitions, as the too-small table's HINT says, change nothing here
        with pytest.raises(TableError) as caught:
            ingest(params(tmp_path / "t.parquet", partitions=count), tmp_path / "out")
        (line,) = str(caught.value).splitlines()
        assert "the table has no usable rows" in line and "HINT: point data.table.path at a table with rows" in line
    frame(rows=30).to_parquet(tmp_path / "t.parquet")
    assert ingest(params(tmp_path / "t.parquet", partitions=1), tmp_path / "out")["rows_read"] == 30


def test_a_pinned_checksum_refuses_a_changed_table(tmp_path):
    path = tmp_path / "t.csv"
    frame().to_csv(path, index=False)
    pinned = fingerprint(path)
    frame(seed=3).to_csv(path, index=False)
    with pytest.raises(TableError, match="differs from data.table.sha256"):
        ingest(params(path, sha256=pinned), tmp_path / "out")


def test_the_files_ingestion_hashed_are_handed_over_unread_and_one_written_since_is_hashed_by_its_reader(
    tmp_path, monkeypatch
):
    frame().to_csv(tmp_path / "t.csv", index=False)
    folder = tmp_path / "results" / "data" / "t-1"  # the step writes into the dataset's folder: the final paths
    ingest(params(tmp_path / "t.csv"), folder)
    again = folder / "train" / "part-00002.safetensors"
    again.write_bytes(again.read_bytes())  # the same bytes, written after ingestion hashed them
    table.hand_over_written(folder)
    assert not (folder / table.WRITTEN).exists()
    handed = {name for name in PARTS if partitions.handed_path(folder / f"{name}.safetensors").is_file()}
    assert handed == set(PARTS) - {"train/part-00002"}
    hashed = []
    real = partitions.file_checksum
    monkeypatch.setattr(
        partitions, "file_checksum", lambda path, algorithm: hashed.append(path.name) or real(path, algorithm)
    )
    verified = partitions.VerifiedFiles()
    for name in PARTS:
        verified.verify(folder / f"{name}.safetensors", json.loads((folder / f"{name}.json").read_text()))
    assert hashed == ["part-00002.safetensors"]
    again.write_bytes(b"garbage")
    with pytest.raises(DataIntegrityError, match="part-00002.safetensors"):
        partitions.VerifiedFiles().verify(again, json.loads((folder / "train" / "part-00002.json").read_text()))


def test_a_damaged_file_of_a_table_names_its_ingestion_s_summary_to_ask_for_and_a_generated_one_itself(tmp_path):
    """A table's files are remade by its one ingestion job (its ingest.json asked for), also where an earlier version
    placed them and left no ingest.json; a generated dataset's file by its own job."""
    frame().to_csv(tmp_path / "t.csv", index=False)
    folder = tmp_path / "t-1"
    ingest(params(tmp_path / "t.csv"), folder)
    entry = json.loads((folder / "train" / "part-00001.json").read_text())
    (folder / "train" / "part-00001.safetensors").write_bytes(b"garbage")
    for _ in range(2):
        with pytest.raises(DataIntegrityError) as raised:
            partitions.verify_file(folder / "train" / "part-00001.safetensors", entry)
        assert f"HINT: delete {folder / 'ingest.json'} and rerun snakemake with it as a target" in str(raised.value)
        (folder / "ingest.json").unlink(missing_ok=True)  # a dataset placed by an earlier version has none
    generated = tmp_path / "s-1" / "val.safetensors"
    tensors = {"features": np.zeros((3, 2), np.float32), "labels": np.zeros(3, np.int64), "ids": np.arange(3)}
    entry = partitions.write_partition(generated, tensors, {})
    partitions.write_sidecar(generated.with_suffix(".json"), entry)
    generated.write_bytes(b"garbage")
    with pytest.raises(DataIntegrityError, match=f"HINT: delete the file and rerun snakemake .* {generated}\\)"):
        partitions.verify_file(generated, entry)


def hive_frame(rows: int = 400) -> pd.DataFrame:
    """``frame`` with feature c a partition column's values (0..3), and a and b exact in float32 (so a CSV's
    text and Parquet's binary give the same bits)."""
    data = frame(rows)
    data[["a", "b"]] = (data[["a", "b"]] * 8).round() / 8
    data["c"] = np.arange(rows) % 4
    return data


def arrow(data: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(data, preserve_index=False)


# The writers of hive layout (c=0/, c=1/ ... without c in the files): each keeps the rows' order in a folder.
HIVE_WRITERS = {
    "pyarrow.dataset": lambda data, root: ds.write_dataset(
        arrow(data), root, format="parquet", partitioning=["c"], partitioning_flavor="hive", preserve_order=True
    ),
    "pyarrow.parquet": lambda data, root: pq.write_to_dataset(arrow(data), root, partition_cols=["c"]),
    "pandas": lambda data, root: data.to_parquet(root, partition_cols=["c"]),
    "csv": lambda data, root: ds.write_dataset(
        arrow(data), root, format="csv", partitioning=["c"], partitioning_flavor="hive", preserve_order=True
    ),
}


@pytest.mark.parametrize("writer", HIVE_WRITERS)
def test_a_hive_folder_ingests_every_row_with_its_folder_values_as_the_rows_in_one_file(tmp_path, writer):
    data = hive_frame()
    HIVE_WRITERS[writer](data, tmp_path / "hive")
    names = sorted(p.relative_to(tmp_path / "hive").as_posix() for p in (tmp_path / "hive").rglob("*.*"))
    assert [n.partition("/")[0] for n in names] == ["c=0", "c=1", "c=2", "c=3"], names
    first = tmp_path / "hive" / names[0]
    columns = pd.read_csv(first, nrows=0).columns if writer == "csv" else pq.read_schema(first).names
    assert "c" not in columns, "the partition column is only in the folders' names"
    # The same rows in the order the folder is read (c=0/ first), c inside the one file.
    ordered = data.sort_values("c", kind="stable", ignore_index=True)
    ordered.to_parquet(tmp_path / "flat.parquet")
    summary = ingest(params(tmp_path / "hive"), tmp_path / "hive-out", chunk_rows=37)
    ingest(params(tmp_path / "flat.parquet"), tmp_path / "flat-out", chunk_rows=37)
    assert summary["rows_read"] == 400 and sum(summary["records"].values()) == 400
    hive, flat = files_of(tmp_path / "hive-out"), files_of(tmp_path / "flat-out")
    assert {k: v for k, v in hive.items() if k != "ingest.json"} == {
        k: v for k, v in flat.items() if k != "ingest.json"
    }
    parts = [loaded(tmp_path / "hive-out", name) for name in PARTS]
    ids = np.concatenate([p.ids.numpy() for p in parts])
    assert sorted(ids.tolist()) == list(range(400))
    for part in parts:
        assert np.array_equal(part.features.numpy()[:, 2], ordered["c"].to_numpy(np.float32)[part.ids.numpy()])


def test_a_null_folder_value_is_missing_and_a_text_one_is_not_a_number(tmp_path):
    data = hive_frame()
    data["c"] = pd.array([0, 1, 2, None] * 100, dtype="Int64")
    HIVE_WRITERS["pyarrow.dataset"](data, tmp_path / "hive")
    with pytest.raises(TableError) as refused:
        ingest(params(tmp_path / "hive"), tmp_path / "out")
    (line,) = str(refused.value).splitlines()
    assert "c=__HIVE_DEFAULT_PARTITION__/part-0.parquet: column 'c', row 1: missing or non-finite value" in line
    assert line.endswith("HINT: clean the table, or set data.table.nan_policy: drop to skip such rows.")
    kept = ingest(params(tmp_path / "hive", nan_policy="drop"), tmp_path / "out")
    assert (kept["rows_read"], kept["rows_dropped"], sum(kept["records"].values())) == (400, 100, 300)
    (tmp_path / "hive" / "c=eu").mkdir()
    shutil.copy(tmp_path / "hive" / "c=0" / "part-0.parquet", tmp_path / "hive" / "c=eu" / "part-0.parquet")
    with pytest.raises(
        TableError, match=r"c=eu/part-0\.parquet: column 'c', row 1: 'eu' is not a number.*HINT"
    ) as text:
        ingest(params(tmp_path / "hive", nan_policy="drop"), tmp_path / "out")
    # The HINT's setting, as it prints it: the folders' values are one category each.
    assert str(text.value).endswith("when data.table.categories lists it: categories: [c].")
    done = ingest(params(tmp_path / "hive", nan_policy="drop", categories=["c"]), tmp_path / "categories")
    assert (done["rows_read"], done["rows_dropped"], sum(done["records"].values())) == (500, 100, 400)


def test_a_column_in_the_file_is_read_from_the_file_and_a_missing_one_names_the_folders_too(tmp_path):
    data = hive_frame(100)
    (tmp_path / "hive" / "c=9").mkdir(parents=True)
    data.to_parquet(tmp_path / "hive" / "c=9" / "part-0.parquet")
    ingest(params(tmp_path / "hive", partitions=1), tmp_path / "out")
    part = loaded(tmp_path / "out", "train/part-00000")
    assert np.array_equal(part.features.numpy()[:, 2], data["c"].to_numpy(np.float32)[part.ids.numpy()])
    with pytest.raises(TableError, match=r"no column 'd' \(the file has: a, b, c, note, y\)\. HINT: fix"):
        ingest(params(tmp_path / "hive", features=["a", "d"]), tmp_path / "out")


def test_parquet_partitions_written_in_place_are_the_spills_bytes(tmp_path, monkeypatch):
    """A Parquet table's rows go straight to their partitions (row counts from the footers: data.inplace);
    the files are what the spill path writes."""
    data = frame(rows=700)
    (tmp_path / "pq").mkdir()
    data.iloc[:300].to_parquet(tmp_path / "pq" / "part-0.parquet", row_group_size=128)
    data.iloc[300:].to_parquet(tmp_path / "pq" / "part-1.parquet")
    placed = []
    real = table.InPlace.finish
    monkeypatch.setattr(table.InPlace, "finish", lambda self: placed.append(self) or real(self))
    ingest(params(tmp_path / "pq"), tmp_path / "in-place", chunk_rows=50)
    assert placed, "a Parquet table is written in place"
    monkeypatch.setattr(table, "known_counts", lambda *args: None)
    ingest(params(tmp_path / "pq"), tmp_path / "spilled", chunk_rows=50)
    assert files_of(tmp_path / "in-place") == files_of(tmp_path / "spilled")
    assert not [p for p in (tmp_path / "in-place").rglob(".*")], "no partial file left"


def test_a_disk_that_fills_while_partitions_are_written_in_place_stops_ingestion_and_leaves_none(tmp_path):
    """The partitions go to a real 256 KB tmpfs: each file is made at its final size (sparse), so the disk fills
    midway through the rows, on the thread that writes them; ingestion stops with the disk's error, every file
    it began is removed and the disk is empty again."""
    frame(rows=20_000).to_parquet(tmp_path / "t.parquet")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", disk], check=True)
    try:
        with pytest.raises(OSError) as raised:
            ingest(params(tmp_path / "t.parquet"), disk / "out", chunk_rows=500)
        assert raised.value.errno == errno.ENOSPC, raised.value
        assert not [p for p in disk.rglob("*") if p.is_file()], "no partition, partial or complete, is left"
        assert shutil.disk_usage(disk).used == 0
    finally:
        subprocess.run(["umount", disk], check=True)


def test_a_big_row_group_is_streamed_only_where_it_is_stored_compressed_and_either_way_gives_the_same_bytes(
    tmp_path, monkeypatch
):
    """Above WHOLE_GROUP_BYTES a row group is read batch by batch only where its stored bytes are well under
    what it decodes to (the batch reader holds them anyway): random floats are decoded whole, a column of one
    repeated value compressed with zstd is streamed; both readings of a table write the same partitions."""
    from snakeddp.data import readers

    rng = np.random.default_rng(0)
    pq.write_table(pa.table({"x": rng.standard_normal(20_000)}), tmp_path / "random.parquet", use_dictionary=False)
    pq.write_table(pa.table({"x": np.zeros(20_000)}), tmp_path / "zeros.parquet", compression="zstd")
    monkeypatch.setattr(readers, "WHOLE_GROUP_BYTES", 1)
    assert readers.decoded_whole(pq.ParquetFile(tmp_path / "random.parquet").metadata.row_group(0))
    assert not readers.decoded_whole(pq.ParquetFile(tmp_path / "zeros.parquet").metadata.row_group(0))
    frame(rows=700).to_parquet(tmp_path / "t.parquet", row_group_size=300)
    monkeypatch.setattr(readers, "decoded_whole", lambda group: True)
    ingest(params(tmp_path / "t.parquet"), tmp_path / "whole", chunk_rows=50)
    monkeypatch.setattr(readers, "decoded_whole", lambda group: False)
    ingest(params(tmp_path / "t.parquet"), tmp_path / "streamed", chunk_rows=50)
    assert files_of(tmp_path / "whole") == files_of(tmp_path / "streamed")
