"""Checksums for files and for JSON-able values, the identity of everything snakeddp records.

Records of identity (configs, manifests, checkpoints, environments) use sha256. Data partitions,
which a training process hashes before every first use, use BLAKE3 (``PARTITION_HASH``): the
same 256-bit strength at about 3.4x sha256's speed on one core (bench/results.md, 1.). Entries
written before it carry sha256 and still verify (``entry_checksum``).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_CHUNK = 8 << 20
_WINDOW = 4 << 20  # a multiple of mmap.ALLOCATIONGRANULARITY
# The checksum new partition entries carry; entries name theirs by key (one of FILE_HASHES).
PARTITION_HASH = "blake3"


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in chunks (hashlib releases the GIL, so threads overlap)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# sha256_file_once's memory: a file's hex sha256 by what any write to it changes.
_HASHED: dict[tuple[int, int, int, int, int], str] = {}
# A file changed less than this before its hash ended is hashed again at the next ask: a write within the same
# tick of the file system's clock would leave every stamp as it was (git's "racy" entries; a tick is at most 10 ms
# on local file systems, a second on some network ones).
RACY_S = 1.0


def _stamps(path: str | Path) -> tuple[int, int, int, int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def sha256_file_once(path: str | Path) -> str:
    """``sha256_file``, read once per process while the file stays as it was: remembered by its device, inode, size,
    mtime and ctime (a write or a touch moves ctime, and nothing sets it back; a rename moves neither), so a
    restore's two checks of a checkpoint (``run.attempt.restorable``, then ``provenance.lineage.prepare`` once the
    attempt moved back) read 1 GB once, not twice, and a file written between them is read again."""
    before = _stamps(path)
    if before in _HASHED:
        return _HASHED[before]
    digest = sha256_file(path)
    if _stamps(path) == before and time.time_ns() - before[4] > RACY_S * 1e9:
        _HASHED[before] = digest
    return digest


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace, so equal values always hash equal."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_json(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def blake3_file(path: str | Path) -> str:
    """Hex BLAKE3 of a file, memory-mapped a window at a time (no copy of a cached file) on one
    thread: a rank's prefetch thread hashes beside training, and BLAKE3's thread pool is not safe
    across fork(). Mapping the whole file at once (blake3's update_mmap) put all of it in the
    process's resident set during the hash: a training rank's peak RSS grew by a partition
    (bench/results.md, 5.)."""
    # Imported where used: the report and the workflow hash only JSON and records (sha256), and
    # the report stage's environment (envs/report.yaml) has no blake3.
    import blake3

    digest = blake3.blake3()
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        for offset in range(0, size, _WINDOW):
            length = min(_WINDOW, size - offset)
            with mmap.mmap(handle.fileno(), length, offset=offset, access=mmap.ACCESS_READ) as window:
                digest.update(window)
    return digest.hexdigest()


def blake3_bytes(*pieces: bytes | memoryview) -> str:
    """Hex BLAKE3 of the pieces' bytes one after another (no joined copy)."""
    import blake3

    digest = blake3.blake3()
    for piece in pieces:
        digest.update(piece)
    return digest.hexdigest()


def partition_checksum(*pieces: bytes | memoryview) -> dict[str, str]:
    """The checksum field of a new partition entry of these bytes: ``{PARTITION_HASH: hex}``."""
    return {PARTITION_HASH: blake3_bytes(*pieces)}


def partition_hasher() -> Any:
    """A running checksum of a new partition's bytes (``update`` them in file order, then ``partition_hashed``):
    for a file hashed as it is written, not read back."""
    import blake3

    return blake3.blake3()


def partition_hashed(digest: Any) -> dict[str, str]:
    """The checksum field of a new partition entry from its running checksum (``partition_hasher``)."""
    return {PARTITION_HASH: digest.hexdigest()}


def partition_file_checksum(path: str | Path) -> dict[str, str]:
    return {PARTITION_HASH: file_checksum(path, PARTITION_HASH)}


# Every checksum a partition entry may carry, in the order a reader prefers them.
FILE_HASHES = {"blake3": blake3_file, "sha256": sha256_file}


def entry_checksum(entry: Mapping[str, Any]) -> tuple[str, str]:
    """(algorithm, hex) of a partition entry: BLAKE3 when it has one, else sha256 (older manifests)."""
    for algorithm in FILE_HASHES:
        if algorithm in entry:
            return algorithm, entry[algorithm]
    raise KeyError(f"entry {entry.get('file')!r} has no checksum ({' or '.join(FILE_HASHES)})")


def file_checksum(path: str | Path, algorithm: str) -> str:
    return FILE_HASHES[algorithm](path)
