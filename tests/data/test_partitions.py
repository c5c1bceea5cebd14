"""Partition files: atomic, checksummed, pickle-free; bad files are refused by name."""

import json
import os
import pickle
import re
import subprocess
import sys
import time
import tracemalloc

import blake3
import numpy as np
import pytest
import torch

from snakeddp.data import partitions
from snakeddp.data.generate import write_dataset_manifest, write_synthetic
from snakeddp.data.partitions import DataIntegrityError
from snakeddp.util import hashing
from snakeddp.util.hashing import partition_file_checksum, sha256_file
from tests.helpers import subprocess_env


@pytest.fixture
def params():
    return {
        "seed": 0,
        "name": "t",
        "source": "synthetic",
        "num_records_per_train_file": 64,
        "num_val_records": 32,
        "num_features": 4,
        "num_classes": 1,
        "labels": "teacher",
        "label_noise": 0.0,
    }


@pytest.fixture
def dataset(tmp_path, params):
    entries = []
    for i in range(2):
        write_synthetic(
            params, "train", i, tmp_path / f"train/part-{i:05d}.safetensors", tmp_path / f"train/part-{i:05d}.json"
        )
        entries.append(tmp_path / f"train/part-{i:05d}.json")
    write_synthetic(params, "val", 0, tmp_path / "val.safetensors", tmp_path / "val.json")
    manifest = write_dataset_manifest(tmp_path / "manifest-2.json", "t-0", params, entries, tmp_path / "val.json")
    return tmp_path, manifest


def test_regenerating_gives_identical_bytes(tmp_path, params):
    write_synthetic(params, "train", 5, tmp_path / "a.safetensors", tmp_path / "a.json")
    write_synthetic(params, "train", 5, tmp_path / "b.safetensors", tmp_path / "b.json")
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


def test_manifest_records_checksums_shapes_and_counts(dataset):
    root, manifest = dataset
    assert manifest["records"] == {"train": 128, "val": 32}
    entry = manifest["train"][1]
    assert entry["file"] == "train/part-00001.safetensors"
    assert entry["tensors"]["features"] == {"dtype": "float32", "shape": [64, 4]}
    part = partitions.read_partition(root / entry["file"], entry)
    assert isinstance(part.features, torch.Tensor) and len(part) == 64
    assert part.ids.tolist() == list(range(64, 128))


def test_new_entries_carry_blake3_and_the_manifest_lists_it(dataset):
    root, manifest = dataset
    for entry in [*manifest["train"], manifest["val"]]:
        assert set(entry) & {"blake3", "sha256"} == {"blake3"}, entry
        assert entry["blake3"] == blake3.blake3((root / entry["file"]).read_bytes()).hexdigest()


@pytest.mark.parametrize("damaged", [False, True])
def test_entries_of_older_manifests_verify_by_their_sha256(dataset, damaged):
    """Manifests written before BLAKE3 list sha256: they verify, and damage is still caught."""
    root, manifest = dataset
    entry = manifest["train"][0]
    path = root / entry["file"]
    older = {key: value for key, value in entry.items() if key != "blake3"} | {"sha256": sha256_file(path)}
    if damaged:
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(DataIntegrityError, match="sha256 checksum mismatch"):
            partitions.read_partition(path, older)
    else:
        assert len(partitions.read_partition(path, older)) == 64


# A dataset written by a process of its own under the usual umask 022, set before snakeddp is imported
# (it reads the umask once, at import): the test's outcome does not depend on the machine's umask.
WRITE_UNDER_UMASK_022 = """
import json, os, sys
os.umask(0o022)
from pathlib import Path
from snakeddp.data.generate import write_dataset_manifest, write_synthetic
root, params = Path(sys.argv[1]), json.loads(sys.argv[2])
write_synthetic(params, "train", 0, root / "train/part-00000.safetensors", root / "train/part-00000.json")
write_synthetic(params, "val", 0, root / "val.safetensors", root / "val.json")
write_dataset_manifest(root / "manifest-1.json", "t-0", params, [root / "train/part-00000.json"], root / "val.json")
"""


def test_written_files_are_readable_by_others(tmp_path, params):
    """Written through a temporary file (mkstemp makes it 0600), each file ends as open() makes one:
    0644 under umask 022, readable by the group and by others."""
    done = subprocess.run(
        [sys.executable, "-c", WRITE_UNDER_UMASK_022, str(tmp_path), json.dumps(params)],
        env=subprocess_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    modes = {str(path.relative_to(tmp_path)): oct(path.stat().st_mode & 0o777) for path in tmp_path.rglob("*.*")}
    assert modes == dict.fromkeys(
        [
            "train/part-00000.safetensors",
            "train/part-00000.json",
            "val.safetensors",
            "val.json",
            "manifest-1.json",
            "train/.part-00000.safetensors.handed",
            ".val.safetensors.handed",
        ],
        oct(0o644),
    )


@pytest.mark.parametrize("damage", ["flip", "truncate", "append"])
def test_damaged_partition_is_refused_by_name(dataset, damage):
    root, manifest = dataset
    entry = manifest["train"][1]
    path = root / entry["file"]
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) - 100]
    else:
        data += b"\0"
    path.write_bytes(bytes(data))
    with pytest.raises(DataIntegrityError) as error:
        partitions.read_partition(path, entry)
    assert "part-00001.safetensors" in str(error.value)
    assert "checksum mismatch" in str(error.value)


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_in_place_of_a_partition_is_never_executed(dataset, tmp_path):
    root, manifest = dataset
    marker = tmp_path / "pwned"
    entry = manifest["train"][0]
    path = root / entry["file"]
    path.write_bytes(pickle.dumps({"features": _Exploit(marker)}))
    with pytest.raises(DataIntegrityError, match="checksum mismatch"):
        partitions.read_partition(path, entry)
    # Even unchecked, the reader parses safetensors only: a pickle is rejected, not loaded.
    with pytest.raises(DataIntegrityError, match="not a readable snakeddp partition"):
        partitions.read_partition(path)
    assert not marker.exists()


def test_shape_mismatch_with_manifest_is_refused(dataset, params):
    root, manifest = dataset
    entry = dict(manifest["train"][0])
    other = {**params, "num_features": 5}
    write_synthetic(other, "train", 0, root / "other.safetensors", root / "other.json")
    forged = {
        **entry,
        **partition_file_checksum(root / "other.safetensors"),
        "bytes": (root / "other.safetensors").stat().st_size,
    }
    with pytest.raises(DataIntegrityError, match="tensor shapes"):
        partitions.read_partition(root / "other.safetensors", forged)


def test_a_partition_is_written_and_hashed_without_a_copy_of_it(tmp_path):
    # Joining the tensors into one blob held the partition three times over (arrays, tobytes,
    # join): a data job needs what it generated, plus the header.
    tensors = {
        "features": np.ones((4096, 512), np.float32),
        "labels": np.zeros((4096, 1), np.float32),
        "ids": np.arange(4096, dtype=np.int64),
    }
    size = sum(t.nbytes for t in tensors.values())
    tracemalloc.start()
    try:
        entry = partitions.write_partition(tmp_path / "p.safetensors", tensors, {"split": "train"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size / 8, f"peak {peak} bytes while writing {size} bytes of tensors"
    written = (tmp_path / "p.safetensors").read_bytes()
    assert written == partitions.serialize(tensors, {"split": "train"})
    assert entry["bytes"] == len(written)
    assert entry["blake3"] == blake3.blake3(written).hexdigest()


def test_missing_tensor_is_rejected_at_write(tmp_path):
    with pytest.raises(ValueError, match="lacks tensors"):
        partitions.write_partition(tmp_path / "x.safetensors", {"features": np.zeros((2, 2), np.float32)}, {})


def test_manifest_format_is_checked(tmp_path):
    (tmp_path / "m.json").write_text('{"format": "something-else"}')
    with pytest.raises(DataIntegrityError, match="not a snakeddp-manifest/1 manifest"):
        partitions.load_manifest(tmp_path / "m.json")


@pytest.mark.parametrize(
    ("edit", "where", "lacks"),
    [
        (lambda m: m["train"][1].pop("blake3"), "train[1]", "blake3 or sha256"),
        (lambda m: m["val"].pop("bytes"), "val", "bytes"),
        (lambda m: m["train"][0].update(file=None, bytes="12"), "train[0]", "file, bytes"),
        (lambda m: m.update(train=[]), "train", "file, bytes, blake3 or sha256"),
    ],
)
def test_a_manifest_entry_that_cannot_be_verified_is_refused_by_name(tmp_path, edit, where, lacks):
    entry = {"file": "part.safetensors", "blake3": "ab", "bytes": 3, "records": 1}
    manifest = {"format": "snakeddp-manifest/1", "train": [dict(entry), {**entry, "sha256": "cd"}], "val": entry}
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    assert partitions.load_manifest(tmp_path / "m.json") == manifest  # sha256 alone (older manifests) is enough
    del manifest["train"][1]["blake3"]
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    partitions.load_manifest(tmp_path / "m.json")
    manifest["train"][1]["blake3"] = "ab"
    edit(manifest)
    if where == "train[1]":
        del manifest["train"][1]["sha256"]
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    with pytest.raises(DataIntegrityError, match=rf"manifest entry {re.escape(where)} lacks {lacks}, .* HINT: delete"):
        partitions.load_manifest(tmp_path / "m.json")


def test_writing_partitions_does_not_import_torch(tmp_path, params):
    # Every data job of the workflow writes one partition; importing torch would cost it seconds.
    code = (
        "import sys, json; from snakeddp.data.generate import write_synthetic; "
        "write_synthetic(json.loads(sys.argv[1]), 'train', 0, sys.argv[2], sys.argv[3]); "
        "print(sorted(m for m in ('torch', 'safetensors', 'lightning') if m in sys.modules))"
    )
    part, entry = tmp_path / "part-00000.safetensors", tmp_path / "part-00000.json"
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(params), str(part), str(entry)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"
    assert len(partitions.read_partition(part, json.loads(entry.read_text()))) == params["num_records_per_train_file"]


@pytest.fixture
def counted_hashes(monkeypatch):
    """Counts the full-file hashes a read does; files count as settled as soon as they are written."""
    calls = []
    real = partitions.file_checksum
    monkeypatch.setattr(partitions, "file_checksum", lambda path, kind: calls.append(path) or real(path, kind))
    monkeypatch.setattr(partitions.VerifiedFiles, "SETTLED_NS", 0)
    partitions.VERIFIED.clear()
    yield calls
    partitions.VERIFIED.clear()


def test_a_process_hashes_an_unchanged_partition_once(dataset, counted_hashes):
    root, manifest = dataset
    entry = manifest["train"][0]
    partitions.handed_path(root / entry["file"]).unlink()  # not handed over by its writer (another machine's)
    for _ in range(3):
        partitions.read_partition(root / entry["file"], entry)
    assert len(counted_hashes) == 1


def test_a_partition_changed_after_its_check_is_caught_before_it_is_used_again(dataset, counted_hashes):
    root, manifest = dataset
    entry = manifest["train"][0]
    path = root / entry["file"]
    partitions.read_partition(path, entry)
    time.sleep(0.05)  # past the file system's clock tick, which SETTLED_NS (0 here) otherwise covers
    # Same size, mtime set back: only the ctime (which no user call can set) tells.
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(DataIntegrityError, match="checksum mismatch"):
        partitions.read_partition(path, entry)


def test_a_file_written_just_before_its_check_is_hashed_again(dataset, counted_hashes, monkeypatch):
    monkeypatch.setattr(partitions.VerifiedFiles, "SETTLED_NS", 10**12)  # nothing counts as settled
    root, manifest = dataset
    entry = manifest["train"][0]
    partitions.handed_path(root / entry["file"]).unlink()
    partitions.read_partition(root / entry["file"], entry)
    partitions.read_partition(root / entry["file"], entry)
    assert len(counted_hashes) == 2


def test_a_partition_handed_over_by_its_writer_is_not_hashed_again_unless_it_changed(dataset, counted_hashes):
    """The data stage hashed it as it wrote it: training trusts that entry while the file keeps the stamp it was
    handed over with; one changed since (same size, mtime set back: only the ctime tells) is hashed and refused."""
    root, manifest = dataset
    first, second = (root / e["file"] for e in manifest["train"])
    partitions.read_partition(first, manifest["train"][0])
    assert counted_hashes == [], "handed over: not hashed"
    before = second.stat()
    data = bytearray(second.read_bytes())
    data[len(data) // 2] ^= 0xFF
    second.write_bytes(bytes(data))
    os.utime(second, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(DataIntegrityError, match="checksum mismatch"):
        partitions.read_partition(second, manifest["train"][1])
    assert len(counted_hashes) == 1
    record = json.loads(partitions.handed_path(first).read_text())
    record["stamp"][0] += 1  # handed over on another machine (another device)
    partitions.handed_path(first).write_text(json.dumps(record))
    partitions.VERIFIED.clear()
    partitions.read_partition(first, manifest["train"][0])
    assert len(counted_hashes) == 2, "a stamp of another machine is not this file's: hashed"


def test_a_file_written_while_it_is_handed_over_is_not_handed_over(tmp_path, params, monkeypatch):
    """hand_over lets the clock pass the file's ctime by a tick, then stamps again: a write meanwhile (in the
    tick of the first stamp, where the ctime might not move) leaves the file to be hashed by its reader."""
    path = tmp_path / "p.safetensors"
    entry = write_synthetic(params, "train", 0, path, tmp_path / "p.json")
    partitions.handed_path(path).unlink()
    real_sleep = time.sleep
    monkeypatch.setattr(time, "time_ns", lambda: path.stat().st_ctime_ns)  # still in the ctime's tick
    monkeypatch.setattr(time, "sleep", lambda s: path.write_bytes(b"x" * path.stat().st_size) or real_sleep(s))
    partitions.hand_over(path, entry)
    assert not partitions.handed_path(path).exists()


def test_a_file_whose_times_are_whole_seconds_is_left_to_its_reader_to_hash(tmp_path, params, monkeypatch):
    """A file system that keeps whole seconds (its ctime's nanoseconds 0) would need a second's wait per file."""
    path = tmp_path / "p.safetensors"
    entry = write_synthetic(params, "train", 0, path, tmp_path / "p.json")
    partitions.handed_path(path).unlink()
    real = partitions._stamp_of
    monkeypatch.setattr(partitions, "_stamp_of", lambda p: [*real(p)[:4], 1_700_000_000 * 10**9])
    partitions.hand_over(path, entry)
    assert not partitions.handed_path(path).exists()
    monkeypatch.setattr(partitions, "_stamp_of", real)
    partitions.hand_over(path, entry)
    assert partitions.handed_path(path).exists()


@pytest.mark.parametrize("extra", [0, 1, 4095])
@pytest.mark.parametrize("windows", [0, 1, 2])
def test_a_files_blake3_is_the_blake3_of_its_bytes_across_window_edges(tmp_path, windows, extra):
    """blake3_file maps the file a window at a time: sizes on and around the windows' edges."""
    data = np.random.default_rng(windows * 7 + extra).bytes(windows * hashing._WINDOW + extra)
    (tmp_path / "f").write_bytes(data)
    assert hashing.blake3_file(tmp_path / "f") == blake3.blake3(data).hexdigest()
