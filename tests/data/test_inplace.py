"""Partitions written in place (snakeddp.data.inplace): each one's BLAKE3 taken as its bytes are written, in file
order, where every byte before its features is known before the rows are read (a binary task's); read back from
the file otherwise (a multiclass task's labels come before its features). The checksum is the file's either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snakeddp.data import inplace, split
from snakeddp.data.inplace import InPlace
from snakeddp.data.table import TableError, ingest
from snakeddp.util.hashing import blake3_file
from tests.data.test_windowed import folder_of
from tests.helpers import subprocess_env
from tests.tables import frame, params


@pytest.fixture
def read_back(monkeypatch):
    """The files whose checksum ingestion read back from the file (the real hash still runs)."""
    calls = []
    real = inplace.partition_file_checksum
    monkeypatch.setattr(inplace, "partition_file_checksum", lambda path: calls.append(Path(path).name) or real(path))
    return calls


def entries_match_files(out: Path) -> int:
    """Every partition's entry names its file's BLAKE3 (hashed here, from the file); how many there are."""
    entries = sorted(out.rglob("*.json"))
    entries = [e for e in entries if e.name not in ("ingest.json", "written.json")]
    for entry in entries:
        assert json.loads(entry.read_text())["blake3"] == blake3_file(entry.with_suffix(".safetensors")), entry
    return len(entries)


@pytest.mark.parametrize("split_by", ["global", "windows"])
@pytest.mark.parametrize("chunk_rows", [None, 7])
def test_a_binary_task_s_partitions_are_hashed_as_they_are_written_and_none_is_read_back(
    tmp_path, monkeypatch, read_back, split_by, chunk_rows
):
    """The global split (a table under one window) and the windowed split (windows of 1,000 rows here), in the
    default chunks and in chunks of 7 rows (a partition's features hashed in many pieces)."""
    if split_by == "windows":
        monkeypatch.setattr(split, "WINDOW_ROWS", 1000)
    folder = folder_of(tmp_path, rows=3000)
    summary = ingest(params(folder, partitions=3), tmp_path / "out", chunk_rows=chunk_rows)
    assert summary["split"] == ("global" if split_by == "global" else {"windows": 3, "window_rows": 1000})
    assert read_back == []
    assert entries_match_files(tmp_path / "out") == 4


def test_a_multiclass_task_s_partitions_whose_labels_come_first_are_hashed_from_their_files(tmp_path, read_back):
    (tmp_path / "pq").mkdir()
    frame(rows=700).to_parquet(tmp_path / "pq" / "part-0.parquet", row_group_size=128)
    ingest(params(tmp_path / "pq", classes=3), tmp_path / "out", chunk_rows=50)
    assert sorted(read_back) == [*(f"part-0000{t}.safetensors" for t in range(3)), "val.safetensors"]
    assert entries_match_files(tmp_path / "out") == 4


def test_rows_other_than_the_ids_a_file_was_opened_with_stop_it_in_one_line_and_leave_nothing(tmp_path):
    """The ids are written with the header: rows handed on in another order (a table that changed while it was
    read) are refused, not written under the ids they do not have."""
    path = tmp_path / "part.safetensors"
    placed = InPlace([path], [3], [{}], ("<f4", (2,)), binary=True, ids=[np.array([4, 8, 9])])
    features = np.zeros((3, 2), dtype=np.float32)
    placed.add(np.array([4]), np.zeros(1), features[:1], np.zeros(1, dtype=np.int64))
    with pytest.raises(TableError) as refused:
        placed.add(np.array([9, 8]), np.zeros(2), features[1:], np.zeros(2, dtype=np.int64))
    placed.abandon()
    (line,) = str(refused.value).splitlines()
    assert line.startswith("part.safetensors: other rows than the table's files said it holds")
    assert line.endswith("HINT: rerun once the table is no longer being written.")
    assert list(tmp_path.iterdir()) == []


# A local ingestion killed outright (SIGKILL: no finally runs) once train partition 0 is in place, while validation,
# which takes rows from every window, is still being written.
KILLED = """
import json, os, signal, sys
from snakeddp.data import split, windowed
from snakeddp.data.table import ingest

if sys.argv[3] == "windows":
    split.WINDOW_ROWS = 1000
    said = windowed.say
    def killed_once_published(line):
        said(line)
        if "partition 0 published" in line:
            os.kill(os.getpid(), signal.SIGKILL)
    windowed.say = killed_once_published
else:
    synced = os.fsync
    def killed_syncing(fd):  # the global split publishes every file at its end: killed as it syncs the first
        os.kill(os.getpid(), signal.SIGKILL)
    os.fsync = killed_syncing
ingest(json.loads(sys.argv[1]), sys.argv[2])
"""


@pytest.mark.parametrize("split_by", ["global", "windows"])
def test_a_killed_ingestion_leaves_its_partial_files_only_in_train(tmp_path, split_by):
    """data_table's outputs are train/ (a directory), val.*, and ingest.json: a file begun beside them, as
    validation's partial file was, outlived the job, which Snakemake removes (train/ with all it holds)."""
    folder = folder_of(tmp_path, rows=3000)
    out = tmp_path / "out"
    command = [sys.executable, "-c", KILLED, json.dumps(params(folder, partitions=3)), str(out), split_by]
    killed = subprocess.run(command, env=subprocess_env(), capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert sorted(os.listdir(out)) == ["train"]
    assert ".val.safetensors.partial" in os.listdir(out / "train")
