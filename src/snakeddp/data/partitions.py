"""Partition files (safetensors) and the manifest that checksums them.

A partition holds ``features`` (float32, [n, d]), ``labels`` ([n, 1] float32 for binary tasks,
[n] int64 for multiclass) and ``ids`` (int64 [n], stable sample ids). safetensors is a plain
header plus raw bytes: nothing in it can execute code, and it loads by memory-mapping.

Reading verifies the file's checksum (BLAKE3, or sha256 in older manifests: snakeddp.util.hashing)
against the manifest *before* parsing it, so a modified,
truncated or foreign file (a pickle dropped in its place, say) is rejected by name; a process
hashes a file again only when it changed since (``VerifiedFiles``).
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from snakeddp.errors import DataIntegrityError
from snakeddp.util import rerun
from snakeddp.util.fsutil import atomic_write, atomic_write_json, read_json
from snakeddp.util.hashing import FILE_HASHES, entry_checksum, file_checksum, partition_checksum
from snakeddp.util.paths import inside

if TYPE_CHECKING:  # reading partitions needs torch (training); writing them (the data stage) does not
    import torch

MANIFEST_FORMAT = "snakeddp-manifest/1"
# The longest a clock tick of a file system's times lasts where they have nanoseconds (a kernel's jiffy, at most
# 10 ms): what ``hand_over`` waits after a file's ctime before it takes the stamp it hands the file over with.
HANDED_TICK_NS = 20_000_000
TENSOR_NAMES = ("features", "labels", "ids")


@dataclass(frozen=True)
class Partition:
    """One loaded partition; tensors may be memory-mapped views of the file."""

    name: str
    features: torch.Tensor
    labels: torch.Tensor
    ids: torch.Tensor

    def __len__(self) -> int:
        return self.features.shape[0]


def describe(tensors: Mapping[str, np.ndarray]) -> dict[str, Any]:
    return {name: {"dtype": str(t.dtype), "shape": list(t.shape)} for name, t in tensors.items()}


_DTYPES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


def encode(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> list[memoryview]:
    """The safetensors encoding of ``tensors`` as its pieces (the header, then each tensor's bytes,
    not copied), byte-for-byte reproducible.

    safetensors' own writer emits its JSON header from a hash map, so the key order (and the
    file's checksum) changes between runs; this writes the same format with sorted keys.
    Widest dtypes come first so every tensor starts aligned to its item size (zero-copy mmap).
    """
    arrays = {name: np.ascontiguousarray(t) for name, t in tensors.items()}
    header, order = encode_header({name: (a.dtype, a.shape) for name, a in arrays.items()}, metadata)
    return [memoryview(header), *(memoryview(arrays[name].reshape(-1)).cast("B") for name in order)]


def serialize(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> bytes:
    """``encode``'s pieces joined: the whole file's bytes."""
    return b"".join(encode(tensors, metadata))


def encode_header(
    specs: Mapping[str, tuple[np.dtype, tuple[int, ...]]], metadata: Mapping[str, str]
) -> tuple[bytes, list[str]]:
    """The safetensors header (length prefix included) for tensors of these dtypes and shapes, and
    the order their bytes follow it in. Writers that stream a partition use it directly."""
    order = sorted(specs, key=lambda name: (-np.dtype(specs[name][0]).itemsize, name))
    header: dict[str, Any] = {"__metadata__": dict(sorted(metadata.items()))} if metadata else {}
    offset = 0
    for name in order:
        dtype, shape = np.dtype(specs[name][0]), [int(n) for n in specs[name][1]]
        nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        header[name] = {"dtype": _DTYPES[str(dtype)], "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text, order


def write_partition(path: str | Path, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> dict[str, Any]:
    """Write tensors atomically and return the manifest entry (checksum of the bytes written)."""
    missing = set(TENSOR_NAMES) - set(tensors)
    if missing:
        raise ValueError(f"partition {path} lacks tensors {sorted(missing)}")
    # Written and hashed piece by piece from the arrays themselves: joining them into one blob
    # first copied the partition twice (tobytes, join), 3x its size in memory and 0.04 s of
    # each 40 MB partition job (bench/results.md, 2.).
    pieces = encode(tensors, metadata)
    atomic_write(path, lambda handle: _write_pieces(handle, pieces))
    return {
        "file": Path(path).name,
        **partition_checksum(*pieces),
        "bytes": sum(piece.nbytes for piece in pieces),
        "records": int(tensors["features"].shape[0]),
        "tensors": describe(tensors),
    }


def _write_pieces(handle: Any, pieces: list[memoryview]) -> None:
    for piece in pieces:
        handle.write(piece)


def as_target(path: Path) -> Path:
    """``path`` as a snakemake target: relative to the working directory (the workflow's) when inside it."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return Path(path)


def rerun_for(path: str | Path, named: str = "its path") -> str:
    """How to have Snakemake make ``path`` again: the same command, whose config flags name the dataset,
    with ``path`` as a target beside ``all``."""
    command = rerun.snakemake("all", str(as_target(path)))
    return f"rerun snakemake with {named} as a target beside all, {rerun.SAME_CONFIG} ({command})"


def _remake_hint(path: Path) -> str:
    """How a damaged or missing data file is made again. Named as a target: Snakemake never remakes a file that an
    up-to-date output (the manifest) was made from, so a plain rerun after deleting it would find it missing again.
    A table's files are its ingestion's, in one job (rule data_table): its summary, ingest.json, is what to ask for
    (a dataset an earlier version placed has none: its validation entry's task, which only ingestion records, says
    it is a table's)."""
    dataset = path.parent.parent if path.parent.name == "train" else path.parent
    summary = dataset / "ingest.json"
    if summary.is_file() or _ingested(dataset):
        return (
            f"HINT: delete {as_target(summary)} and {rerun_for(summary, 'it')}: the table is ingested again, its "
            "files byte-identical, and the run resumes."
        )
    return (
        f"HINT: delete the file and {rerun_for(path)}: it is regenerated byte-identical and the run resumes "
        "(or restore the file from where it came)."
    )


def _ingested(dataset: Path) -> bool:
    try:
        return "task" in read_json(dataset / "val.json")
    except (OSError, ValueError, TypeError):
        return False


def verify_file(path: Path, entry: Mapping[str, Any]) -> None:
    """Raise DataIntegrityError unless ``path`` has exactly the size and checksum of ``entry``."""
    if not path.is_file():
        raise DataIntegrityError(f"{path}: data file is missing. {_remake_hint(path)}")
    size = path.stat().st_size
    if size != entry["bytes"]:
        raise DataIntegrityError(
            f"{path}: size {size} bytes does not match the manifest's {entry['bytes']} "
            f"(truncated or replaced); checksum mismatch. {_remake_hint(path)}"
        )
    algorithm, expected = entry_checksum(entry)
    actual = file_checksum(path, algorithm)
    if actual != expected:
        raise DataIntegrityError(
            f"{path}: {algorithm} checksum mismatch: manifest has {expected}, file has {actual}. "
            f"The file changed after the manifest was written. {_remake_hint(path)}"
        )


def handed_path(path: str | Path) -> Path:
    """Where the stamp of a file handed over by its writer is kept (``hand_over``): beside it, hidden."""
    path = Path(path)
    return path.with_name(f".{path.name}.handed")


def hand_over(path: str | Path, entry: Mapping[str, Any]) -> None:
    """Record that ``path`` is the file ``entry`` describes, as the code that wrote it hashed it (while writing
    it, or from the bytes it had just written): its stat stamp now, with the entry's checksum. A reader on this
    machine that finds the file with the same stamp trusts the entry without hashing it again
    (``VerifiedFiles``); any write, link, rename or ``utime`` since moves its ctime or inode, and another
    machine sees another device, so the file is hashed there as before."""
    stamp = _stamp_of(path)
    if stamp[4] % 1_000_000_000 == 0:
        return  # a file system of whole seconds: a tick would cost a second here; its reader hashes it instead
    # File system times are coarse: a write in the tick of the stamp would leave it as it was. So the clock is let
    # pass the file's ctime by a tick and the stamp taken again: any write after that shows as a newer ctime, and
    # one before it as a changed stamp (not handed over then).
    wait = stamp[4] + HANDED_TICK_NS - time.time_ns()
    if wait > 0:
        time.sleep(wait / 1e9)
    if _stamp_of(path) == stamp:
        atomic_write_json(handed_path(path), {"stamp": stamp, "checksum": list(entry_checksum(entry))})


def _stamp_of(path: str | Path) -> list[int]:
    st = Path(path).stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _handed(path: Path) -> tuple[Any, ...] | None:
    """The stamp its writer handed ``path`` over with (``hand_over``), as ``VerifiedFiles`` keeps stamps."""
    try:
        record = read_json(handed_path(path))
        return (*record["stamp"], tuple(record["checksum"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class VerifiedFiles:
    """Files this process has checksummed, each with the stat stamp it had when checked.

    A training process reads each partition once every P epochs; hashing it again each time cost
    7× a memcpy of it (bench/results.md, 1. Partition read). A file that was written to or replaced
    since its check has a new ctime (no user call can set ctime back) or inode, so it is hashed
    again before it is used. File system times are coarse (a clock tick): a stamp is kept only for
    a file unchanged for ``SETTLED_NS`` before its check, so a write in the check's tick still
    shows as a newer ctime. A file its writer handed over (``hand_over``: the data stage, which hashed
    it as it wrote it) is trusted with the stamp it was handed over with: its bytes are not hashed twice.
    """

    SETTLED_NS = 1_000_000_000

    def __init__(self) -> None:
        self._stamps: dict[Path, tuple[Any, ...]] = {}

    @staticmethod
    def _stamp(path: Path, entry: Mapping[str, Any]) -> tuple[Any, ...]:
        st = path.stat()
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, entry_checksum(entry)

    def verify(self, path: Path, entry: Mapping[str, Any]) -> None:
        """``verify_file``, skipped when this process verified the same, unchanged file against the same entry."""
        try:
            stamp = self._stamp(path, entry)
        except OSError:
            stamp = None
        if stamp is not None and self._stamps.get(path) == stamp:
            return
        if stamp is not None and _handed(path) == stamp:
            self._stamps[path] = stamp
            return
        verify_file(path, entry)
        if stamp is not None and time.time_ns() - stamp[4] > self.SETTLED_NS:
            self._stamps[path] = stamp

    def clear(self) -> None:
        self._stamps.clear()


VERIFIED = VerifiedFiles()


def read_partition(path: str | Path, entry: Mapping[str, Any] | None = None) -> Partition:
    """Load a partition as torch tensors; with ``entry``, verify checksum and shapes first (once per
    process and unchanged file: ``VerifiedFiles``)."""
    # Imported here, not at the top: the data stage's jobs only write, and importing torch
    # cost each of them seconds (bench/results.md, 2. Data generation).
    from safetensors import SafetensorError, safe_open

    path = Path(path).absolute()
    if entry is not None:
        VERIFIED.verify(path, entry)
    try:
        with safe_open(str(path), framework="pt") as handle:
            tensors = {name: handle.get_tensor(name) for name in TENSOR_NAMES}
    except (SafetensorError, OSError, KeyError, ValueError) as exc:
        raise DataIntegrityError(f"{path}: not a readable snakeddp partition: {exc}") from None
    if entry is not None:
        shapes = {name: list(t.shape) for name, t in tensors.items()}
        expected = {name: spec["shape"] for name, spec in entry["tensors"].items()}
        if shapes != expected:
            raise DataIntegrityError(f"{path}: tensor shapes {shapes} differ from the manifest's {expected}")
    return Partition(name=path.name, **tensors)


def write_sidecar(path: str | Path, entry: Mapping[str, Any]) -> None:
    atomic_write_json(path, dict(entry))


def write_manifest(
    path: str | Path,
    dataset: str,
    params: Mapping[str, Any],
    train: list[Mapping[str, Any]],
    val: Mapping[str, Any],
    task: Mapping[str, Any],
) -> dict[str, Any]:
    """Write the manifest from the entries each partition's writer recorded."""
    manifest = manifest_of(dataset, params, train, val, task)
    atomic_write_json(path, manifest)
    return manifest


def manifest_of(
    dataset: str,
    params: Mapping[str, Any],
    train: list[Mapping[str, Any]],
    val: Mapping[str, Any],
    task: Mapping[str, Any],
) -> dict[str, Any]:
    """The manifest of the given entries (a streamed run's data identity is the one data_manifest writes)."""
    if not train:
        raise ValueError("a dataset needs at least one train partition")
    return {
        "format": MANIFEST_FORMAT,
        "dataset": dataset,
        "params": dict(params),
        "task": dict(task),
        "train": [{**e, "file": f"train/{e['file']}"} for e in train],
        "val": {**val, "file": str(val["file"])},
        "records": {"train": sum(e["records"] for e in train), "val": val["records"]},
    }


def load_manifest(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        manifest = read_json(path)
    except (OSError, ValueError) as exc:
        raise DataIntegrityError(f"{path}: cannot read the data manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise DataIntegrityError(f"{path}: not a {MANIFEST_FORMAT} manifest")
    check_entries(path, manifest)
    return manifest


def check_entries(path: Path, manifest: Mapping[str, Any]) -> None:
    """Every file entry names its file, size and checksum: a reader verifies each one before use."""
    train = manifest.get("train")
    if isinstance(train, list) and train:
        entries = [("val", manifest.get("val")), *((f"train[{i}]", e) for i, e in enumerate(train))]
    else:  # no partitions listed: the list itself is the entry that lacks everything
        entries = [("train", None)]
    for where, entry in entries:
        entry = entry if isinstance(entry, Mapping) else {}
        missing = [
            name
            for name, present in (
                ("file", isinstance(entry.get("file"), str)),
                ("bytes", isinstance(entry.get("bytes"), int)),
                (" or ".join(FILE_HASHES), any(isinstance(entry.get(a), str) for a in FILE_HASHES)),
            )
            if not present
        ]
        if not missing and inside(path.parent, entry["file"]) is None:
            raise DataIntegrityError(
                f"{path}: manifest entry {where} names {entry['file']!r}, which is not a file inside the dataset's "
                "directory (an absolute path, a '..', or a link out of it): snakeddp reads no file a manifest "
                f"points outside its directory. HINT: delete the manifest and {rerun_for(path)}: the data stage "
                "writes it again."
            )
        if missing:
            raise DataIntegrityError(
                f"{path}: manifest entry {where} lacks {', '.join(missing)}, so its file cannot be verified "
                f"(the manifest was edited, or not written by snakeddp). HINT: delete the manifest and "
                f"{rerun_for(path)}: the data stage writes it again from the partitions' own records."
            )
