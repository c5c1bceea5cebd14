"""Columns that are not single numbers, and tables too wide to list: an array column (embeddings), a string
category column one-hot over a vocabulary built from the table, beside scalar features; every column but the
label when data.table.features is left out, resolved sorted so a file's column order changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
import weakref
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import snakeddp
from snakeddp.data import identity
from snakeddp.data.columns import NUMBER, Column, Inputs, Layout
from snakeddp.data.images import ImageSpec
from snakeddp.data.partitions import read_partition
from snakeddp.data.table import TableError, ingest
from tests.data.test_table import files_of
from tests.helpers import subprocess_env

CITIES = ["paris", "oslo", "lima", "cairo"]


def mixed(rows: int = 400, seed: int = 0) -> pa.Table:
    """x (a number), emb (4 float32 values), city (text), y: learnable from each of them."""
    rng = np.random.default_rng(seed)
    city = rng.integers(0, len(CITIES), rows)
    emb = rng.standard_normal((rows, 4)).astype(np.float32)
    x = rng.standard_normal(rows)
    y = ((emb[:, 0] + x + (city % 2) * 2 - 1) > 0).astype(np.int64)
    return pa.table(
        {
            "x": x,
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), 4),
            "city": pa.array([CITIES[c] for c in city]),
            "y": y,
        }
    )


def params(path: Path, features: list[str] | None = None, **table) -> dict:
    spec = {"path": str(path), "format": "auto", "features": features or [], "label": "y", "val_fraction": 0.2}
    return {
        "name": "t",
        "source": "table",
        "seed": 1,
        "num_train_files": 2,
        "num_classes": 1,
        "table": {**spec, "nan_policy": "error", "sha256": None, **table},
    }


def test_an_array_and_a_category_column_lie_beside_a_number(tmp_path):
    data = mixed()
    pq.write_table(data, tmp_path / "t.parquet")
    summary = ingest(params(tmp_path / "t.parquet", ["x", "emb", "city"]), tmp_path / "out")
    inputs = summary["task"]["inputs"]
    vocabulary = sorted(CITIES)
    assert inputs == [
        {"column": "x", "kind": "number", "offset": 0, "width": 1},
        {"column": "emb", "kind": "array", "offset": 1, "width": 4},
        {"column": "city", "kind": "category", "offset": 5, "width": 4, "vocabulary": vocabulary, "oov": False},
    ]
    assert summary["task"]["num_features"] == 9
    entry = json.loads((tmp_path / "out" / "val.json").read_text())
    part = read_partition(tmp_path / "out" / "val.safetensors", entry)
    rows = data.take(pa.array(part.ids.numpy())).to_pydict()
    features = part.features.numpy()
    assert np.array_equal(features[:, 0], np.array(rows["x"], dtype=np.float32))
    assert np.array_equal(features[:, 1:5], np.array(rows["emb"], dtype=np.float32))
    assert np.array_equal(features[:, 5:].argmax(axis=1), [vocabulary.index(c) for c in rows["city"]])
    assert (features[:, 5:].sum(axis=1) == 1).all(), "one-hot"


def test_an_array_row_of_another_length_is_refused_naming_it(tmp_path):
    emb = [[1.0, 2.0]] * 10
    emb[6] = [1.0]
    pq.write_table(pa.table({"emb": pa.array(emb, pa.list_(pa.float64())), "y": [0, 1] * 5}), tmp_path / "t.parquet")
    with pytest.raises(
        TableError, match=r"t\.parquet: column 'emb', row 7: an array of 1 values, and the column's arrays have 2"
    ):
        ingest(params(tmp_path / "t.parquet", ["emb"]), tmp_path / "out")


def test_a_csv_text_column_is_a_category_when_listed_and_not_a_number_otherwise(tmp_path):
    frame = mixed(60).select(["x", "city", "y"]).to_pandas()
    frame.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(
        TableError, match=r"column 'city', row 1 \(line 2\): '.*' is not a number.*data.table.categories"
    ):
        ingest(params(tmp_path / "t.csv", ["x", "city"]), tmp_path / "out")
    summary = ingest(params(tmp_path / "t.csv", ["x", "city"], categories=["city"]), tmp_path / "out")
    assert summary["task"]["inputs"][1]["vocabulary"] == sorted(set(frame["city"]))


def test_numbers_stored_as_text_are_named_so_and_ingest_once_cast_as_the_hint_says(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1500).round(3)
    frame = pd.DataFrame({"x": [str(v) for v in x], "y": (x > 0).astype(int)})
    frame.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(TableError) as refused:
        ingest(params(tmp_path / "t.parquet", ["x"]), tmp_path / "out")
    (line,) = str(refused.value).splitlines()
    assert "column 'x' holds numbers stored as text ('-0.003', '-0.004', '-0.005', ...), so it would be a " in line, (
        line
    )
    assert line.endswith(
        "HINT: cast it to a number where the table is written (pandas: df['x'] = pd.to_numeric(df['x']); pyarrow: "
        "pyarrow.compute.cast(table['x'], pyarrow.float64()); SQL: CAST(x AS DOUBLE)), then rerun."
    ), line
    # The HINT followed (pandas'): the column is a number, its values those of the text.
    frame["x"] = pd.to_numeric(frame["x"])
    frame.to_parquet(tmp_path / "t.parquet")
    summary = ingest(params(tmp_path / "t.parquet", ["x"]), tmp_path / "out")
    assert summary["task"]["inputs"] == [{"column": "x", "kind": "number", "offset": 0, "width": 1}]
    part = read_partition(tmp_path / "out" / "val.safetensors", json.loads((tmp_path / "out" / "val.json").read_text()))
    assert np.array_equal(part.features.numpy()[:, 0], x[part.ids.numpy()].astype(np.float32))
    # Text that is not numbers, as many distinct values, is still a category too large for a one-hot.
    frame["x"] = [f"id{i}" for i in range(len(frame))]
    frame.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(TableError, match=r"category column 'x' has 1,500 distinct values, over 1024 .* HINT: group"):
        ingest(params(tmp_path / "t.parquet", ["x"]), tmp_path / "other")
    # An id column among every column but the label: the HINT names the key that leaves it out, which works.
    frame["z"] = np.arange(len(frame), dtype=float)
    frame.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(TableError, match=r"HINT: .*\(with data.table.features left out: data.table.exclude: \[x\]\)"):
        ingest(params(tmp_path / "t.parquet"), tmp_path / "every")
    summary = ingest(params(tmp_path / "t.parquet", exclude=["x"]), tmp_path / "excluded")
    assert [c["column"] for c in summary["task"]["inputs"]] == ["z"]


def test_a_few_numbers_stored_as_text_train_as_a_category_and_one_line_says_so(tmp_path, capsys):
    """Codes (zip codes) or numbers a CSV loaded as text: within a one-hot's size they train as a category, as
    before, and ingestion says so, where nothing did."""
    frame = pd.DataFrame({"code": ["10", "20", "30.5", "20"] * 50, "colour": ["red", "blue"] * 100})
    frame["y"] = (frame["code"] == "20").astype(int)
    frame.to_parquet(tmp_path / "t.parquet")
    summary = ingest(params(tmp_path / "t.parquet", ["code", "colour"]), tmp_path / "out")
    assert [c["kind"] for c in summary["task"]["inputs"]] == ["category", "category"]
    said = capsys.readouterr().err
    assert (
        "ingest: column 'code' holds numbers stored as text ('10', '20', '30.5'): it trains as a category of 3 "
        "one-hot slots; cast it to a number in the table to train it as one"
    ) in said.splitlines(), said
    assert "'colour' holds" not in said
    # Named in data.table.categories: a category by choice, nothing said.
    ingest(params(tmp_path / "t.parquet", ["code", "colour"], categories=["code"]), tmp_path / "chosen")
    assert "holds numbers stored as text" not in capsys.readouterr().err


def test_left_out_features_are_every_other_column_sorted_whatever_the_file_order(tmp_path):
    rng = np.random.default_rng(0)
    wide = pd.DataFrame({f"f{i:03d}": rng.standard_normal(200).astype(np.float32) for i in range(30)})
    wide["y"] = (wide["f007"] > 0).astype(int)
    wide["row_id"] = np.arange(200)
    wide.to_parquet(tmp_path / "a.parquet")
    wide[list(reversed(wide.columns))].to_parquet(tmp_path / "b.parquet")
    first = ingest(params(tmp_path / "a.parquet", exclude=["row_id"]), tmp_path / "a")
    ingest(params(tmp_path / "b.parquet", exclude=["row_id"]), tmp_path / "b")
    assert [c["column"] for c in first["task"]["inputs"]] == [f"f{i:03d}" for i in range(30)]
    assert files_of(tmp_path / "a") == {k: v for k, v in files_of(tmp_path / "b").items()} | {
        "ingest.json": files_of(tmp_path / "a")["ingest.json"]
    }
    narrowed = ingest(params(tmp_path / "a.parquet", feature_pattern="f00[0-4]"), tmp_path / "c")
    assert [c["column"] for c in narrowed["task"]["inputs"]] == ["f000", "f001", "f002", "f003", "f004"]
    with pytest.raises(TableError, match=r"data.table.exclude names 'nope', which the table does not have"):
        ingest(params(tmp_path / "a.parquet", exclude=["nope"]), tmp_path / "d")


def test_left_out_features_leave_out_the_index_pandas_writes_for_a_filtered_frame(tmp_path):
    """df[df.x > 0].to_parquet(...) writes the kept rows' index as a column, __index_level_0__ (df.to_csv(...) any
    index, as 'Unnamed: 0'): every column but the label took it as a feature, row numbers a sorted table's label
    can be read from (the digits' val_acc fell from 0.92 to 0.50 with it)."""
    data = mixed(400).to_pandas()
    data = data[data["x"] > -1].sort_values("y")  # an index other than 0..n-1, in label order
    data.to_parquet(tmp_path / "t.parquet")
    assert "__index_level_0__" in pq.read_schema(tmp_path / "t.parquet").names
    summary = ingest(params(tmp_path / "t.parquet"), tmp_path / "out")
    assert [c["column"] for c in summary["task"]["inputs"]] == ["city", "emb", "x"]
    listed = ingest(params(tmp_path / "t.parquet", ["__index_level_0__", "x"]), tmp_path / "listed")
    assert [c["column"] for c in listed["task"]["inputs"]] == ["__index_level_0__", "x"], "listed, it is taken"
    # A CSV: to_csv writes the index (any index) first, under no name, which pandas reads as 'Unnamed: 0'.
    data[["x", "y"]].to_csv(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().startswith(",x,y\n")
    summary = ingest(params(tmp_path / "t.csv"), tmp_path / "csv")
    assert [c["column"] for c in summary["task"]["inputs"]] == ["x"]


def test_a_wide_float_chunk_is_laid_out_as_column_by_column_with_nulls_and_infinities_unusable():
    """The float-only path (columns copied into a block, transposed a block of rows at a time, each row put at its
    place) against the column-by-column path on the same chunk: float32 and float64 columns, a null, a NaN, an
    infinity, a float64 beyond float32's range, rows reordered."""
    rng = np.random.default_rng(3)
    rows = 300
    chunk = {f"f{i}": pa.array(rng.standard_normal(rows).astype(np.float32)) for i in range(40)}
    chunk["d"] = pa.array(rng.standard_normal(rows) * 1e3)
    chunk["n"] = pa.array([None if i == 7 else float(i) for i in range(rows)], type=pa.float32())
    chunk["f3"] = pa.array(np.where(np.arange(rows) == 11, np.nan, chunk["f3"].to_numpy()).astype(np.float32))
    chunk["f4"] = pa.array(np.where(np.arange(rows) == 12, np.inf, chunk["f4"].to_numpy()).astype(np.float32))
    chunk["d"] = pa.array(np.where(np.arange(rows) == 13, 1e39, chunk["d"].to_numpy()))
    layout = Layout([Column(name, NUMBER) for name in sorted(chunk)], ImageSpec.of({}))
    order = rng.permutation(rows)
    # Both paths say nothing of the value beyond float32's range (its row is unusable): numpy's own overflow
    # warning reached the ingestion's log.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wide, usable = layout.encode(chunk, rows, lambda column, row: "", 0, order)
        by_column, ok = layout._mixed(chunk, rows, lambda column, row: "", 0)
    assert wide.dtype == np.float32
    assert np.array_equal(wide, by_column[order], equal_nan=True) and np.array_equal(usable, ok[order])
    assert sorted(order[~usable]) == [7, 11, 12, 13]
    float32_only = {name: values for name, values in chunk.items() if name != "d"}
    narrow = Layout([Column(name, NUMBER) for name in sorted(float32_only)], ImageSpec.of({}))
    plain, _ = narrow.encode(float32_only, rows, lambda column, row: "", 0)
    assert np.array_equal(plain, by_column[:, 1:], equal_nan=True)


def test_a_wide_chunk_s_block_of_rows_is_reused_only_once_nothing_holds_it():
    """The blocks a float-only layout lays chunks out in: one still held (a slice kept, a memoryview, as the writing
    thread of a sink holds a chunk) is never written over; one let go is laid out in again, with the new rows."""
    rng = np.random.default_rng(5)
    rows, names = 64, [f"f{i}" for i in range(30)]
    layout = Layout([Column(name, NUMBER) for name in names], ImageSpec.of({}))

    def encoded(seed: int) -> tuple[np.ndarray, np.ndarray]:
        values = np.random.default_rng(seed).standard_normal((rows, len(names))).astype(np.float32)
        chunk = {name: pa.array(values[:, j]) for j, name in enumerate(names)}
        return layout.encode(chunk, rows, lambda column, row: "", 0, rng.permutation(rows))[0], values

    def owner(array: np.ndarray) -> np.ndarray:
        return array if array.base is None else array.base

    first, _ = encoded(1)
    kept, kept_values = first[3:9], first[3:9].copy()
    second, _ = encoded(2)
    view = memoryview(second)
    most = type(layout._rows).MOST
    held = [encoded(seed)[0] for seed in range(3, most + 2)]  # the blocks kept all held: one more, kept by none
    blocks = [weakref.ref(owner(array)) for array in (first, second, *held)]
    assert len({id(block()) for block in blocks}) == most + 1
    del first, second, view, held
    again, values = encoded(most + 2)
    assert any(owner(again) is block() for block in blocks[1:most]), "a block let go is laid out in again"
    assert owner(again) is not blocks[0]() and np.array_equal(kept, kept_values), "one a slice holds is not"
    assert np.array_equal(np.sort(again, axis=0), np.sort(values, axis=0))


# Unseen values are looked up without pandas' deprecated Categorical of values outside its categories (pandas 4 raises).
@pytest.mark.filterwarnings("error::DeprecationWarning", "error::FutureWarning")
def test_inputs_encode_new_rows_as_training_did_and_refuse_or_map_unseen_values(tmp_path):
    pq.write_table(mixed(), tmp_path / "t.parquet")
    task = ingest(params(tmp_path / "t.parquet", ["x", "emb", "city"]), tmp_path / "out")["task"]
    entry = json.loads((tmp_path / "out" / "val.json").read_text())
    part = read_partition(tmp_path / "out" / "val.safetensors", entry)
    rows = mixed().take(pa.array(part.ids.numpy()[:5])).to_pydict()
    assert np.array_equal(Inputs(task).encode(rows).numpy(), part.features.numpy()[:5])
    with pytest.raises(TableError, match=r"column 'city': 'rome' is not in the vocabulary.*unseen: oov"):
        Inputs(task).encode({**rows, "city": ["rome", *rows["city"][1:]]})
    oov = ingest(params(tmp_path / "t.parquet", ["x", "emb", "city"], unseen="oov"), tmp_path / "oov")["task"]
    encoded = Inputs(oov).encode({**rows, "city": ["rome", *rows["city"][1:]]}).numpy()
    assert encoded.shape == (5, 10) and encoded[0, 9] == 1 and encoded[0, 5:9].sum() == 0


def settle(*paths: Path) -> None:
    """Wait until ``paths`` are older than the plan trusts a file's stamp from (identity.SETTLED_NS), as a user's
    table is when the workflow starts: one written just before is hashed again while it is read."""
    wait_ns = max(path.stat().st_ctime_ns for path in paths) + identity.SETTLED_NS - time.time_ns()
    if wait_ns > 0:
        time.sleep(wait_ns / 1e9 + 0.05)


@pytest.mark.e2e
def test_mixed_columns_and_a_thousand_column_table_train_with_no_feature_list(workflow, tiny_config):
    pq.write_table(mixed(1200), workflow.directory / "mixed.parquet")
    rng = np.random.default_rng(1)
    wide = rng.standard_normal((1200, 1000)).astype(np.float32)
    columns = {f"c{i}": wide[:, i] for i in range(1000)}
    columns["y"] = (wide[:, :10].sum(axis=1) > 0).astype(np.int64)
    pq.write_table(pa.table(columns), workflow.directory / "wide.parquet")
    tiny_config["data"] = {
        "name": "cols",
        "source": "table",
        "num_train_files": 2,
        "table": {"path": "mixed.parquet", "label": "y"},
    }
    tiny_config["trainer"] = {"max_epochs": 4, "batch_size": 32}
    tiny_config["sweep"] = {"data.table.path": ["mixed.parquet", "wide.parquet"]}
    workflow.write_config(tiny_config)
    settle(workflow.directory / "mixed.parquet", workflow.directory / "wide.parquet")
    workflow.run()
    records = {
        p.parent.name: json.loads(p.read_text()) for p in workflow.directory.glob("results/runs/*/provenance.json")
    }
    by_path = {r["config"]["data"]["table"]["path"]: r for r in records.values()}
    mixed_run, wide_run = by_path["mixed.parquet"], by_path["wide.parquet"]
    assert mixed_run["config"]["data"]["table"]["features"] == ["city", "emb", "x"]
    assert [c["kind"] for c in mixed_run["data"]["inputs"]] == ["category", "array", "number"]
    assert mixed_run["data"]["inputs"][0]["vocabulary"] == sorted(CITIES)
    assert len(wide_run["config"]["data"]["table"]["features"]) == 1000
    assert wide_run["data"]["inputs"][-1] == {"column": "c999", "kind": "number", "offset": 999, "width": 1}
    for record in (mixed_run, wide_run):
        assert record["training"]["best_val_acc"] > 0.75, record["training"]
    # Ingestion (a job, in the workflow's directory) found the plan's hashes and read no table's bytes twice.
    logs = [p.read_text() for p in workflow.directory.glob("logs/data/*/ingest.log")]
    assert len(logs) == 2 and all(
        "(1 of 1 files as the plan hashed them, 0 hashed again while read)" in t for t in logs
    )
    assert workflow.planned_jobs() == {}, "nothing reruns when nothing changed"
    # At inference the export applies the layout: raw rows (text categories, arrays) in, predictions out.
    exported = workflow.directory / "exported"
    command = [sys.executable, "-m", "snakeddp.cli", "export", mixed_run["run_id"], "--to", str(exported)]
    subprocess.run(command, cwd=workflow.directory, env=subprocess_env(), check=True, capture_output=True, timeout=300)
    rows = mixed(40, seed=9).to_pydict()
    features = snakeddp.inputs(exported).encode(rows)
    with torch.no_grad():
        predicted = (snakeddp.load(exported)(features)[:, 0] > 0).long()
    assert features.shape == (40, 9) and (predicted.numpy() == np.array(rows["y"])).mean() > 0.75


@pytest.mark.parametrize("chunk_rows", [None, 700])
def test_a_wide_float_tables_partitions_are_its_rows_in_split_order_byte_for_byte(tmp_path, chunk_rows):
    """Ingestion's transpose (chunks of a whole row group of 3,000 rows x 400 columns, or of 700 rows: the block it
    reuses then cut shorter for the last) writes each partition as the safetensors encoding of its rows, in row
    order, that the split deals it: the bytes every earlier ingestion wrote."""
    from snakeddp.data import table
    from snakeddp.data.partitions import serialize
    from snakeddp.data.split import assign

    rng = np.random.default_rng(9)
    names = [f"c{j}" for j in range(400)]
    parts = []
    for index in range(3):
        values = rng.standard_normal((3000, len(names)), dtype=np.float32)
        parts.append(pa.table({**{n: values[:, j] for j, n in enumerate(names)}, "y": (values[:, 0] > 0).astype(int)}))
        pq.write_table(parts[-1], tmp_path / f"part-{index}.parquet")
    whole = pa.concat_tables(parts)
    features = np.stack([whole[n].to_numpy() for n in names], axis=1)
    labels = whole["y"].to_numpy().astype(np.float32)
    p = params(tmp_path, names)
    ingest(p, tmp_path / "out", chunk_rows=chunk_rows)
    targets = assign(np.arange(len(labels), dtype=np.int64), p["seed"], 0.2, 2)
    for target, name in [(0, "train/part-00000"), (1, "train/part-00001"), (2, "val")]:
        rows = np.flatnonzero(targets == target)
        expected = {"features": features[rows], "labels": labels[rows, None], "ids": rows.astype(np.int64)}
        split = "val" if target == 2 else "train"
        metadata = {"generator": table.GENERATOR, "split": split, "index": str(0 if split == "val" else target)}
        assert (tmp_path / "out" / f"{name}.safetensors").read_bytes() == serialize(expected, metadata), name
