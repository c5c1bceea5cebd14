"""Partitions written in place as a table's rows arrive, when every partition's row count is known before
any row is read.

A row's partition is a function of its row number alone (``split.assign``), so a Parquet table's (or a Delta
version's) row counts, which its files' footers hold, give each partition's size up front: every file is
created at its final size with its header, and each chunk's rows are written straight to their place in
it. The spill file the general path needs (rows written once to a scratch file, then again into the
partitions) is skipped: on a 1,000-column table that was two of ingestion's four passes over the bytes. The
files are the same bytes as the spill path writes (tests/data/test_table.py compares them), so which path
ran never changes a dataset.

Not for CSV (a CSV's rows are counted only by reading it), ``nan_policy: drop`` (a dropped row moves every
later row), or images of no set size (their shape is known at the first image).

A partition's BLAKE3 is taken as its bytes are written, in file order, so no byte is read back to hash it: its
ids (the row numbers it gets, also known before any row is read) are written with the header, its features are
hashed by the writing thread as each chunk's are written, and a tensor that follows the features (a binary
task's labels) is held, a few bytes a row, and written and hashed after the last row. A partition whose labels
come before its features (a multiclass task's int64 labels, which the table gives only as it is read) is hashed
from the file once it is complete, as before. The bytes, and so the checksum, are the same either way.
"""

from __future__ import annotations

import errno
import os
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from snakeddp.data import pagecache
from snakeddp.data.partitions import encode_header
from snakeddp.errors import TableError
from snakeddp.util.hashing import partition_file_checksum, partition_hashed, partition_hasher

# Bytes written between two write-backs started beside the reading.
FLUSH_BYTES = 64 << 20
# Chunks handed to the writing thread and not written yet: the reading waits beyond this many (each holds its
# rows, about 33 MB for 1,000 float32 columns), so memory stays at about a chunk more than before.
WRITES_AHEAD = 2


@dataclass
class _File:
    path: Path
    partial: Path
    fd: int
    order: list[str]
    cursor: dict[str, int]
    ends: dict[str, int]
    specs: dict[str, tuple[np.dtype, tuple[int, ...]]]
    size: int
    cached: bool
    """Kept in the page cache once complete (the partition training reads first; pagecache)."""
    digest: Any = None
    """The BLAKE3 of its bytes so far, in file order, taken as they are written; None: taken from the file once
    it is complete (its ids were not given, or a tensor the table gives row by row comes before its features)."""
    ids: np.ndarray | None = None
    """Its ids, written with its header (the table row numbers it gets, in the order they are read)."""
    held: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """The tensors after its features (a binary task's labels), held until the last row to be hashed in order."""


class InPlace:
    """The partition files of one ingestion, each at its final size, filled row chunk by row chunk."""

    def __init__(
        self,
        paths: Sequence[Path],
        counts: Sequence[int],
        metadata: Sequence[Mapping[str, str]],
        feature: tuple[str, tuple[int, ...]],
        binary: bool,
        ids: Sequence[np.ndarray] | None = None,
        scratch: Path | None = None,
    ) -> None:
        """``ids``: each file's ids where they are known before reading (each file is then hashed as it is
        written); the rows handed to ``add`` must have them, in that order. ``scratch``: the folder each file is
        written in until it is complete (default: its own), on the file system of its final place."""
        self.binary = binary
        self.scratch = scratch
        self.files: list[_File] = []
        # Syncs and hashes beside the reading: the disk writes back while the next rows are decoded.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snakeddp-inplace")
        self._flushing: Future[None] | None = None
        self._unflushed = 0
        # Each chunk's rows are copied into the files on a thread of their own while the next chunk is decoded and
        # laid out (os.pwrite releases the GIL): on a 1,000-column table the copies into the page cache, slowed
        # by write-back, were a quarter of ingestion on the reading thread.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snakeddp-inplace-write")
        self._writing: deque[Future[None]] = deque()
        try:
            for index, (path, n, meta) in enumerate(zip(paths, counts, metadata, strict=True)):
                known = None if ids is None else np.asarray(ids[index], dtype="<i8")
                self.files.append(self._open(Path(path), int(n), meta, feature, known))
        except BaseException:
            self.abandon()
            raise

    def _open(
        self,
        path: Path,
        n: int,
        metadata: Mapping[str, str],
        feature: tuple[str, tuple[int, ...]],
        ids: np.ndarray | None,
    ) -> _File:
        specs = {
            "features": (np.dtype(feature[0]), (n, *feature[1])),
            "labels": (np.dtype("<f4"), (n, 1)) if self.binary else (np.dtype("<i8"), (n,)),
            "ids": (np.dtype("<i8"), (n,)),
        }
        header, order = encode_header(specs, metadata)
        starts, position = {}, len(header)
        for name in order:
            starts[name] = position
            position += specs[name][0].itemsize * int(np.prod(specs[name][1], dtype=np.int64))
        ends = {name: starts[name] + specs[name][0].itemsize * int(np.prod(specs[name][1])) for name in order}
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = (self.scratch or path.parent) / f".{path.name}.partial"
        fd = os.open(partial, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o666)  # less the umask
        os.write(fd, header)
        os.ftruncate(fd, position)
        file = _File(path, partial, fd, order, dict(starts), ends, specs, position, pagecache.read_next(metadata))
        first = order[: order.index("features")]
        if ids is not None and set(first) <= {"ids"}:  # every byte before the features known now
            if len(ids) != n:
                raise ValueError(f"{path.name}: {len(ids)} ids given for {n} rows")
            file.digest, file.ids = partition_hasher(), ids
            file.digest.update(header)
            if first:
                write_blocks([(fd, ids, starts["ids"])])
                file.digest.update(memoryview(ids).cast("B"))
            file.held = {name: [] for name in order[order.index("features") + 1 :]}
        return file

    def add(self, ids: np.ndarray, labels: np.ndarray, features: np.ndarray, targets: np.ndarray) -> None:
        """One chunk's rows, grouped by target (``targets`` sorted, each target's rows in row order), each
        target's written at the end of its rows so far."""
        arrays = {
            "ids": ids.astype("<i8", copy=False),
            "labels": labels.astype("<f4" if self.binary else "<i8"),
            "features": features,
        }
        bounds = np.searchsorted(targets, np.arange(len(self.files) + 1))
        writes: list[tuple[int, np.ndarray, int]] = []
        hashes: list[tuple[Any, np.ndarray]] = []
        for target, file in enumerate(self.files):
            start, stop = int(bounds[target]), int(bounds[target + 1])
            if stop == start:
                continue
            for name in file.order:
                data = np.ascontiguousarray(arrays[name][start:stop])
                at = file.cursor[name]
                if at + data.nbytes > file.ends[name]:
                    raise TableError(
                        f"{file.path.name}: more rows than the table's files said they hold (a file changed while it "
                        "was read). HINT: rerun once the table is no longer being written."
                    )
                file.cursor[name] += data.nbytes
                if name in file.held:
                    file.held[name].append(data)
                elif name == "ids" and file.ids is not None:
                    _check_ids(file, data, at)  # written with the header
                else:
                    writes.append((file.fd, data, at))
                    self._unflushed += data.nbytes
                    if file.digest is not None:  # the features, one chunk after the other
                        hashes.append((file.digest, data))
        while len(self._writing) >= WRITES_AHEAD or (self._writing and self._writing[0].done()):
            self._writing.popleft().result()  # a write's error (a full disk) stops the reading here
        self._writing.append(self._writer.submit(_write_and_hash, writes, hashes))
        if self._unflushed >= FLUSH_BYTES and (self._flushing is None or self._flushing.done()):
            self._flushing, self._unflushed = self._pool.submit(self._flush), 0

    def _written(self) -> None:
        """Every chunk handed to the writing thread is in the files (or its error raised)."""
        while self._writing:
            self._writing.popleft().result()

    def _flush(self) -> None:
        """Write back what the files hold so far. Left to the kernel, all of it waited for the last fsync (or, in
        a memory-limited cgroup, for reclaim to write it back while the reading stalled)."""
        for file in self.files:
            os.fdatasync(file.fd)

    def finish(self) -> list[dict[str, Any]]:
        """Each file complete, synced and in place; their manifest entries."""
        try:
            self._written()
            if self._flushing is not None:
                self._flushing.result()
            hashes = []
            for file in self.files:
                if file.cursor != file.ends:
                    raise TableError(
                        f"{file.path.name}: fewer rows than the table's files said they hold (a file changed while it "
                        "was read). HINT: rerun once the table is no longer being written."
                    )
                _write_held(file)
                os.fsync(file.fd)
                os.close(file.fd)
                file.fd = -1
                os.replace(file.partial, file.path)
                # Settled on the thread while the next file is synced: its checksum (taken as it was written, or read
                # from the page cache), and its pages let go.
                hashes.append(self._pool.submit(_checksum, file))
            entries = [
                {
                    "file": file.path.name,
                    **checksum.result(),
                    "bytes": file.size,
                    "records": file.specs["ids"][1][0],
                    "tensors": {n: {"dtype": str(d), "shape": list(s)} for n, (d, s) in file.specs.items()},
                }
                for file, checksum in zip(self.files, hashes, strict=True)
            ]
        except BaseException:
            self.abandon()
            raise
        self._pool.shutdown()
        self._writer.shutdown()
        return entries

    def abandon(self) -> None:
        """Close and remove what is not in place yet (an ingestion that stopped)."""
        # No write or sync may be left on a closed descriptor (or one the number is given to next).
        self._writer.shutdown(wait=True, cancel_futures=True)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for file in self.files:
            if file.fd >= 0:
                os.close(file.fd)
                file.fd = -1
            file.partial.unlink(missing_ok=True)


def _check_ids(file: _File, ids: np.ndarray, at: int) -> None:
    """The rows handed on are the ones whose ids the file was opened with, in that order."""
    assert file.ids is not None
    first = (at - (file.ends["ids"] - file.ids.nbytes)) // file.ids.itemsize
    if not np.array_equal(file.ids[first : first + len(ids)], ids):
        raise TableError(
            f"{file.path.name}: other rows than the table's files said it holds (a file changed while it was read). "
            "HINT: rerun once the table is no longer being written."
        )


def _write_held(file: _File) -> None:
    """The tensors held until the last row (those after the features), written and hashed in file order."""
    for name, pieces in file.held.items():
        at = file.ends[name] - sum(piece.nbytes for piece in pieces)
        for piece in pieces:
            write_blocks([(file.fd, piece, at)])
            file.digest.update(memoryview(piece.reshape(-1)).cast("B"))
            at += piece.nbytes
        pieces.clear()


def _checksum(file: _File) -> dict[str, str]:
    """A complete, synced file's checksum entry (taken as it was written, else read back from the page cache); its
    pages then leave the page cache unless it is to stay there."""
    checksum = partition_file_checksum(file.path) if file.digest is None else partition_hashed(file.digest)
    if not file.cached:
        pagecache.drop(file.path)
    return checksum


def _write_and_hash(writes: Sequence[tuple[int, np.ndarray, int]], hashes: Sequence[tuple[Any, np.ndarray]]) -> None:
    """One chunk's rows written, then each file's features added to its checksum (in the order they were given)."""
    write_blocks(writes)
    for digest, data in hashes:
        digest.update(memoryview(data.reshape(-1)).cast("B"))


def write_blocks(writes: Sequence[tuple[int, np.ndarray, int]]) -> None:
    """One chunk's rows, each block at its offset in its file."""
    for fd, data, offset in writes:
        view = memoryview(data.reshape(-1)).cast("B")
        while view:  # pwrite may write less than asked (a signal, a file system's limit)
            written = os.pwrite(fd, view, offset)
            if not written:  # a regular file's write of nothing: no progress would ever come
                raise OSError(errno.EIO, "a partition file took no bytes")
            view, offset = view[written:], offset + written
