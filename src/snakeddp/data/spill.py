"""Partitions written through one spill file, where their sizes are not known before the rows are read (a
CSV, ``nan_policy: drop``, images): the rows go to one scratch file as fixed-size records as they arrive,
remembered per partition as segments, and each partition is then written from its segments into its
safetensors layout. Memory stays at about one chunk of rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from snakeddp.data import pagecache
from snakeddp.data.partitions import encode_header
from snakeddp.util.fsutil import atomic_write
from snakeddp.util.hashing import partition_file_checksum


class Spill:
    """Rows as fixed-size records in one scratch file, remembered per target as (offset, count) segments."""

    def __init__(self, path: Path, targets: int, binary: bool) -> None:
        self.path, self.binary = path, binary
        # Set by the first records added: an image's shape may be known only once the first one is decoded.
        self.dtype: np.dtype = np.dtype([])
        self.handle = open(path, "wb")  # closed by finish()
        self.segments: list[list[tuple[int, int]]] = [[] for _ in range(targets)]
        self.offset = 0

    def add(self, ids: np.ndarray, labels: np.ndarray, features: np.ndarray, targets: np.ndarray) -> None:
        """One chunk's rows, grouped by target (``targets`` sorted, each target's rows in row order)."""
        fields = [("ids", "<i8"), ("labels", "<f4" if self.binary else "<i8")]
        records = np.empty(len(ids), dtype=[*fields, ("features", features.dtype, features.shape[1:])])
        records["ids"], records["labels"], records["features"] = ids, labels, features
        if not self.dtype.names:
            self.dtype = records.dtype
        bounds = np.searchsorted(targets, np.arange(len(self.segments) + 1))
        self.handle.write(records.tobytes())
        for target in range(len(self.segments)):
            start, stop = int(bounds[target]), int(bounds[target + 1])
            if stop > start:
                self.segments[target].append((self.offset + start * self.dtype.itemsize, stop - start))
        self.offset += records.nbytes

    def count(self, target: int) -> int:
        return sum(n for _, n in self.segments[target])

    def read(self, target: int, rows: int) -> Iterator[np.ndarray]:
        """The target's records in row order, at most ``rows`` at a time."""
        with open(self.path, "rb") as handle:
            for offset, count in self.segments[target]:
                for start in range(0, count, rows):
                    n = min(rows, count - start)
                    handle.seek(offset + start * self.dtype.itemsize)
                    yield np.frombuffer(handle.read(n * self.dtype.itemsize), dtype=self.dtype)

    def finish(self) -> None:
        self.handle.close()

    def write_partition(self, target: int, path: Path, metadata: Mapping[str, str], rows: int) -> dict[str, Any]:
        """Write one partition's safetensors file from its segments; return its manifest entry."""
        n = self.count(target)
        features = self.dtype["features"]
        specs = {
            "features": (features.base, (n, *features.shape)),
            "labels": (self.dtype["labels"], (n, 1) if self.dtype["labels"] == np.float32 else (n,)),
            "ids": (self.dtype["ids"], (n,)),
        }
        header, order = encode_header(specs, metadata)
        starts, position = {}, len(header)
        for name in order:
            starts[name] = position
            position += np.dtype(specs[name][0]).itemsize * int(np.prod(specs[name][1], dtype=np.int64))

        def write(handle: Any) -> None:
            handle.write(header)
            handle.truncate(position)
            handle.flush()
            fd, cursor = handle.fileno(), dict(starts)
            for records in self.read(target, rows):
                for name in order:
                    data = np.ascontiguousarray(records[name]).tobytes()
                    os.pwrite(fd, data, cursor[name])
                    cursor[name] += len(data)

        atomic_write(path, write)
        checksum = partition_file_checksum(path)  # synced, and read from the page cache, which then lets it go
        if not pagecache.read_next(metadata):
            pagecache.drop(path)
        return {
            "file": path.name,
            **checksum,
            "bytes": position,
            "records": n,
            "tensors": {name: {"dtype": str(np.dtype(d)), "shape": list(s)} for name, (d, s) in specs.items()},
        }
