"""Written partitions let go of the page cache once they are on disk and hashed.

Without this, ingestion left every byte it wrote in the page cache: in a memory-limited cgroup (cgroup v1
charges a file's cached pages to the group that wrote them) the partitions filled the limit, and the kernel
reclaimed them page by page while ingestion and training waited (the issue's scale, 4 GB of partitions in a
3 GB limit: a failcnt of 68,991). A page that is written back and clean is dropped at once
(``POSIX_FADV_DONTNEED``); the first train partition, which training reads first, is kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Not every platform has posix_fadvise (macOS): there the kernel's own reclaim is left to do it.
_ADVISE = getattr(os, "posix_fadvise", None)


def read_next(metadata: Mapping[str, str]) -> bool:
    """Whether a partition (its safetensors metadata) is the one training reads first: epoch 1's, partition 0."""
    return metadata.get("split") == "train" and metadata.get("index") == "0"


def drop(path: str | Path) -> None:
    """Drop a synced file's pages from the page cache (the file stays whole on disk)."""
    _advise(path, 0, 0)


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


def _advise(path: str | Path, offset: int, length: int) -> None:
    """POSIX_FADV_DONTNEED over a range of a file (0, 0: all of it). Advice only: a file that cannot be opened
    for it (gone, or a file system that refuses) is left to the kernel, never an error of the run."""
    if _ADVISE is None:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        _ADVISE(fd, offset, length, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass  # a file system without the call (EINVAL, ENOSYS): nothing dropped, nothing lost
    finally:
        os.close(fd)
