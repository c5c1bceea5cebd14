"""A run beside its ingestion (snakeddp.data.stream): the stream manifest from the footers, each partition's entry
waited for while a real ingestion publishes it, the dataset's manifest identity once every entry is in, and the
one line where ingestion stops or never begins."""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from snakeddp.config import parts
from snakeddp.data import layout, stream
from snakeddp.data.generate import write_dataset_manifest
from snakeddp.data.partitions import read_partition
from snakeddp.data.source import open_source
from snakeddp.data.table import TableError, ingest
from snakeddp.errors import DataIntegrityError
from tests.data.test_windowed import folder_of, small_windows  # noqa: F401 (a fixture)
from tests.helpers import subprocess_env
from tests.tables import FEATURES, frame, params

PARTS = 3


@pytest.fixture
def dataset(tmp_path, small_windows):  # noqa: F811
    """A table of six windows (1,000 rows each), its stream manifest, and the dataset's folder."""
    found = params(folder_of(tmp_path), partitions=PARTS)
    root = tmp_path / "results" / "data" / "t-1"
    manifest = stream.write_stream_manifest(root / f"stream-{PARTS}.json", "t-1", found)
    return found, manifest, root


def test_a_run_gets_each_partition_as_ingestion_publishes_it_and_the_manifest_it_makes(dataset):
    found, manifest, root = dataset
    assert stream.streams(found) and manifest["records"]["train"] == sum(manifest["counts"][:-1])
    entries = stream.Stream(root, manifest)
    seen = {}
    reader = threading.Thread(target=lambda: seen.update(first=entries[0], val=entries.val()))
    reader.start()  # waits for the dataset's train/, then for each entry in it
    summary = ingest(found, root)
    reader.join(timeout=60)
    assert summary["records"] == manifest["records"]  # the footers' counts were ingestion's
    assert seen["first"]["file"] == "train/part-00000.safetensors"
    first = read_partition(root / seen["first"]["file"], seen["first"])
    assert len(first) == manifest["counts"][0]
    # The identity a run records: the sha256 of the manifest data_manifest writes from the same entries.
    path, sha256, content = entries.completed()
    train = [root / f"train/part-{i:05d}.json" for i in range(PARTS)]
    written = write_dataset_manifest(root / f"manifest-{PARTS}.json", "t-1", found, train, root / "val.json")
    assert path == root / f"manifest-{PARTS}.json" and content == written
    assert sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert written["task"] == manifest["task"]


def test_an_ingestion_that_stops_ends_the_wait_in_one_line_naming_its_log(dataset, tmp_path, monkeypatch):
    found, manifest, root = dataset
    # One value of the last file is NaN: ingestion stops after publishing the first window's partitions.
    folder = tmp_path / "pq"
    frame = __import__("pandas").read_parquet(folder / "part-1.parquet")
    frame.loc[frame.index[-1], "a"] = np.nan
    frame.to_parquet(folder / "part-1.parquet", row_group_size=250)
    with pytest.raises(TableError):
        ingest(found, root)
    assert not list((root / "train").glob("part-*")), "ingestion removes what it published"
    entries = stream.Stream(root, manifest)
    # Removed once the wait has seen train/: a sleep stood for that, which a loaded machine can outlast, and a wait
    # that never saw train/ waits out STALL_S instead.
    seen, real = threading.Event(), stream._progress

    def progress(train):
        state = real(train)
        if state is not None:
            seen.set()
        return state

    monkeypatch.setattr(stream, "_progress", progress)
    failed = []
    waiting = threading.Thread(target=lambda: failed.append(_error(lambda: entries[PARTS - 1])))
    waiting.start()
    assert seen.wait(30), "the wait never saw train/"
    shutil.rmtree(root / "train")  # as Snakemake removes a failed job's directory output
    waiting.join(timeout=30)
    (message,) = failed
    assert "its ingestion stopped before it was published" in message and message.count("\n") == 0
    assert "HINT: logs/data/t-1/ingest.log says why" in message


def test_an_ingestion_that_fails_before_its_first_partition_stops_the_run_at_once(dataset, monkeypatch):
    """A column the table lacks fails ingestion in a second, before train/ exists: the run beside it waited out
    STALL_S (5 minutes) and then said no ingestion had begun. The ingest step, as the rule runs it, leaves a record
    naming its invocation, and a run of the same invocation stops on it; one of an earlier invocation does not."""
    found, manifest, root = dataset
    bad = {**found, "table": {**found["table"], "features": ["a", "nope"]}}
    env = subprocess_env(SNAKEDDP_INVOCATION="invocation-2")
    step = [sys.executable, "-m", "snakeddp.steps", "ingest", "--params", json.dumps(bad), "--out", str(root)]
    done = subprocess.run(step, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and "no column 'nope'" in done.stderr, done.stderr
    shutil.rmtree(root / "train", ignore_errors=True)  # as Snakemake removes a failed job's directory output
    monkeypatch.setattr(stream, "STALL_S", 30.0)
    monkeypatch.setenv("SNAKEDDP_INVOCATION", "invocation-2")
    began = time.monotonic()
    message = _error(lambda: stream.Stream(root, manifest)[0])
    assert time.monotonic() - began < 5 and "its ingestion failed (the data_table job above)" in message, message
    assert "HINT: logs/data/t-1/ingest.log says why" in message and message.count("\n") == 0
    monkeypatch.setattr(stream, "STALL_S", 0.5)
    monkeypatch.setenv("SNAKEDDP_INVOCATION", "invocation-3")  # the next invocation: its ingestion is another
    assert "no ingestion of the table began" in _error(lambda: stream.Stream(root, manifest)[0])


def test_a_run_whose_ingestion_never_begins_says_what_to_ask_for(dataset, monkeypatch):
    _, manifest, root = dataset
    monkeypatch.setattr(stream, "STALL_S", 0.5)
    message = _error(lambda: stream.Stream(root, manifest)[0])
    assert "no ingestion of the table began" in message
    assert f"HINT: ask for {root / f'manifest-{PARTS}.json'} with the run" in message


def test_a_run_that_ends_stops_waiting_for_a_partition_but_still_takes_the_manifest(dataset):
    found, manifest, root = dataset
    entries = stream.Stream(root, manifest)
    ended = []

    def prefetch():
        try:
            entries[1]
        except stream.Closed:
            ended.append("closed")

    waiting = threading.Thread(target=prefetch)
    waiting.start()  # a prefetch of a partition the run will not train, its ingestion not begun
    time.sleep(0.3)
    entries.close()
    waiting.join(timeout=5)
    assert not waiting.is_alive() and ended == ["closed"]
    ingest(found, root)
    path, sha256, _ = entries.completed()  # rank 0's record, after the DataModule's teardown closed the stream
    written = write_dataset_manifest(
        path, "t-1", found, [root / f"train/part-{i:05d}.json" for i in range(PARTS)], root / "val.json"
    )
    assert written and sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_ingestion_takes_the_vocabularies_the_stream_kept_of_the_same_table_and_reads_them_again_otherwise(
    tmp_path,
    small_windows,  # noqa: F811
    capsys,
):
    folder = folder_of(tmp_path)
    data = frame(6000).assign(city=np.array(["oslo", "lima", "rome"])[np.arange(6000) % 3])
    data.iloc[:4000].to_parquet(folder / "part-0.parquet", row_group_size=250)
    data.iloc[4000:].to_parquet(folder / "part-1.parquet", row_group_size=250)
    found = params(folder, partitions=PARTS, features=["a", "city"])
    root = tmp_path / "results" / "data" / "t-1"
    manifest = stream.write_stream_manifest(root / f"stream-{PARTS}.json", "t-1", found)
    assert "reading the vocabularies of city" in capsys.readouterr().err

    def ingested() -> tuple[list, str]:
        shutil.rmtree(root / "train", ignore_errors=True)  # as Snakemake removes the directory output first
        summary = ingest(found, root)
        (city,) = [c for c in summary["task"]["inputs"] if c["column"] == "city"]
        return city["vocabulary"], capsys.readouterr().err

    vocabulary, said = ingested()
    assert "ingest: the vocabularies of city, as another job read them" in said and "reading the" not in said, said
    assert (
        vocabulary == ["lima", "oslo", "rome"]
        and json.loads((root / "val.json").read_text())["task"]["inputs"] == (manifest["task"]["inputs"])
    )
    # A kept result that is not well formed (a vocabulary out of order) is not taken: the pass is made again.
    kept = json.loads((root / layout.KEPT).read_text())
    kept["columns"]["city"]["vocabulary"].reverse()
    (root / layout.KEPT).write_text(json.dumps(kept))
    vocabulary, said = ingested()
    assert "reading the vocabularies of city" in said and vocabulary == ["lima", "oslo", "rome"], said
    # Another table at the same path (a file rewritten: its size and time), the same parameters: read again.
    data.iloc[4000:].assign(city="kyiv").to_parquet(folder / "part-1.parquet", row_group_size=250)
    vocabulary, said = ingested()
    assert "reading the vocabularies of city" in said and vocabulary == ["kyiv", "lima", "oslo", "rome"], said
    # The other job in the middle of its pass (it holds the lock): this one says that it waits, once, then takes
    # what the other kept.
    shutil.rmtree(root / "train")
    with open(root / layout.KEPT_LOCK, "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiter = threading.Thread(target=ingest, args=(found, root))
        waiter.start()
        said, deadline = "", time.monotonic() + 60
        while "waiting for the other job" not in said and time.monotonic() < deadline:
            time.sleep(0.05)
            said += capsys.readouterr().err
        assert waiter.is_alive(), said
    waiter.join(60)
    said += capsys.readouterr().err
    assert (
        said.count("ingest: waiting for the other job of this dataset, which is reading the vocabularies of city") == 1
    )
    assert "as another job read them" in said and "ingest: reading the" not in said, said


def test_a_table_without_category_columns_is_not_looked_at_file_by_file_for_a_pass_it_does_not_need(dataset):
    """What keys the kept pass is each file's size and time: a stat per file, slow on a cluster's file system for a
    table of many files. A table of numbers alone has no pass to keep, so no file is looked at for it."""
    found, _, root = dataset
    source = open_source(parts.Table.of(found["table"]), None)
    kept = layout.kept_in(root, found, source)
    layout.layout_of(source, FEATURES, {}, 100, print, kept)
    assert kept is not None and "identity" not in vars(kept)
    assert kept.identity and "identity" in vars(kept)  # computed on demand, as a table with a category has it


def test_a_table_of_fewer_rows_than_a_window_trains_after_its_manifest(tmp_path):
    found = params(folder_of(tmp_path), partitions=PARTS)  # 6,000 rows, windows of 2^18
    assert not stream.streams(found)
    assert stream.train_input("t-1", found, PARTS, "local") == f"results/data/t-1/manifest-{PARTS}.json"


def test_only_the_local_platform_streams(dataset):
    found, _, _ = dataset
    assert stream.train_input("t-1", found, PARTS, "local") == f"results/data/t-1/stream-{PARTS}.json"
    assert stream.train_input("t-1", found, PARTS, "azureml") == f"results/data/t-1/manifest-{PARTS}.json"


def _error(call) -> str:
    with pytest.raises(DataIntegrityError) as caught:
        call()
    return str(caught.value)
