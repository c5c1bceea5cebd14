"""Written partitions let go of the page cache once they are on disk and hashed.

Without this, ingestion left every byte it wrote in the page cache: in a memory-limited cgroup (cgroup v1
charges a file's cached pages to the group that wrote them) the partitions filled the limit, and the kernel
reclaimed them page by page while ingestion and training waited (the issue's scale, 4 GB of partitions in a
3 GB limit: a failcnt of 68,991). A page that is written back and clean is dropped at once
(``POSIX_FADV_DONTNEED``); the first train partition, which training reads first, is kept.

Training lets go of the same pages once an epoch is done (``Readers``): the partition it trained on is dropped
when the last object read from its file is gone, and the next epoch's, prefetched, stays.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# Not every platform has posix_fadvise (macOS): there the kernel's own reclaim is left to do it.
_ADVISE = getattr(os, "posix_fadvise", None)
# What one read-ahead advice asks for: Linux caps each call at the device's read-ahead window, 128 KiB by default.
READ_AHEAD_BYTES = 128 << 10


def read_next(metadata: Mapping[str, str]) -> bool:
    """Whether a partition (its safetensors metadata) is the one training reads first: epoch 1's, partition 0."""
    return metadata.get("split") == "train" and metadata.get("index") == "0"


def drop(path: str | Path) -> None:
    """Drop a synced file's pages from the page cache (the file stays whole on disk)."""
    _advise(path, 0, 0)


def read_ahead(path: str | Path) -> None:
    """Ask for a whole file's pages to be read into the cache in the background (``POSIX_FADV_WILLNEED``): a
    partition whose checksum training does not take (ingestion handed it over, or it was checked an epoch before)
    is not in the cache, and its tensors map the file, so the step's gathers would fault its pages in one by one
    (bench 14: 0.21-0.28 s an epoch for a 147 MB partition, 0.05 s from the cache)."""
    # Linux reads at most the device's read-ahead window per call (8 MB of a 147 MB file here), so the file is
    # asked for in pieces no larger than the smallest window (128 KiB, the kernel's default). Where the call is
    # refused, the step reads the pages as it faults them.
    _advise(path, 0, 0, "POSIX_FADV_WILLNEED", piece=READ_AHEAD_BYTES)


class Readers:
    """Drops a file's pages once the last object read from it (a partition) is gone and ``wanted`` does not say it
    is read again next. The object's end says its epoch is over (Lightning holds an epoch's loader until the next
    one's is made); the drop waits for ``let_go``, since a weakref's callback runs before the object's tensors, and
    so the file's mapping, are gone, and the kernel does not drop a mapped page. An object that ended on another
    thread than the one letting go may still be unmapping its file: its file is dropped by the next ``let_go``, or
    at once on its own thread (a drop that fell between the callback and the unmapping left every page in the
    cache, in 1 of about 15 runs of tests/data/test_pagecache.py on 2 busy cores)."""

    def __init__(self, wanted: Callable[[Path], bool]) -> None:
        self._wanted = wanted
        self._alive: Counter[Path] = Counter()
        self._released: dict[Path, int] = {}  # by file: the thread its last object ended on
        self._seen: set[Path] = set()  # released on another thread and seen by a let_go: taken by the next
        self._lock = threading.Lock()  # objects are read on the prefetch thread and end on either thread

    def read(self, path: str | Path, holder: object) -> None:
        path = Path(path)
        with self._lock:
            self._alive[path] += 1
            self._released.pop(path, None)
            self._seen.discard(path)
        weakref.finalize(holder, self._gone, path).atexit = False

    def _gone(self, path: Path) -> None:
        with self._lock:
            self._alive[path] -= 1
            if self._alive[path] == 0:
                del self._alive[path]
                self._released[path] = threading.get_ident()

    def let_go(self) -> list[Path]:
        """Drop the files whose objects are all gone, but those ``wanted``; the files dropped."""
        here = threading.get_ident()
        with self._lock:
            taken = sorted(path for path, thread in self._released.items() if thread == here or path in self._seen)
            for path in taken:
                del self._released[path]
            self._seen = set(self._released)
        dropped = [path for path in taken if not self._wanted(path)]
        for path in dropped:
            drop(path)
        return dropped


def drop_read(path: str | Path, group: Any) -> None:
    """Drop a local Parquet file's pages of one row group (its metadata) once the group is decoded: a table read
    once need not stay in the cache (the issue's 6 GB table went through a 3 GB cgroup by reclaim)."""
    if _ADVISE is None or group.num_columns == 0:
        return
    starts, stops = [], []
    for column in (group.column(i) for i in range(group.num_columns)):
        first = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
        starts.append(first)
        stops.append(first + column.total_compressed_size)
    _advise(path, min(starts), max(stops) - min(starts))


def _advise(path: str | Path, offset: int, length: int, advice: str = "POSIX_FADV_DONTNEED", piece: int = 0) -> None:
    """Advice (POSIX_FADV_DONTNEED unless named) over a range of a file (0, 0: all of it), in calls of ``piece``
    bytes where given. Advice only: a file that cannot be opened for it (gone, or a file system that refuses) is
    left to the kernel, never an error of the run."""
    if _ADVISE is None:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        if piece:
            end = offset + length if length else os.fstat(fd).st_size
            for at in range(offset, end, piece):
                _ADVISE(fd, at, piece, getattr(os, advice))
        else:
            _ADVISE(fd, offset, length, getattr(os, advice))
    except OSError:
        pass  # a file system without the call (EINVAL, ENOSYS): nothing dropped, nothing lost
    finally:
        os.close(fd)
