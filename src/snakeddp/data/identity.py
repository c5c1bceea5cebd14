"""A table's identity, which becomes part of its dataset's id and of every run config that trains on it: a
changed table is a new dataset.

A local table's identity is the sha256 over its files' names (relative to the table), sizes and sha256s: its
content, whatever machine it is on. A table in object storage's is its objects' listing (snakeddp.data.remote);
a Delta table's is its table id, version and data files (snakeddp.data.delta). Metadata alone is not a local
file's identity: an mtime can be set back (``touch -d``, ``cp -p``, ``rsync -t``), two versions can have one size,
and a Parquet footer holds no checksum of its values (its page checksums are optional, and off in pyarrow's and
Spark's writers), so a value changed in place can leave size, mtime and footer as they were.

The content is hashed once: when the workflow plans (``cached_fingerprint``, on several threads: hashlib releases
the GIL), each file's hash kept in the workflow's ``CACHE`` with its stat stamp (device, inode, size, mtime and
ctime, which every write moves and no call sets back) and reused while the stamp is unchanged but for the device
(``same_file``), so a table is not hashed again on every start. Ingestion checks that it reads the table planned
(``Check``): a file whose stamp is the one the plan hashed is that file; any other (changed since) is hashed on a
thread while its rows are decoded. Either way its stamp must be the same before and after it is read, so the rows
ingested are those of the bytes identified.

The device is left out of the comparison: it is the number this host's kernel gave the mount, and a shared file
system's (NFS, Lustre: an anonymous device, numbered in mount order) may differ from host to host while the server's
inode, size and times are the file's everywhere. Each Slurm job plans again on its node, so a device in the
comparison would hash the whole table again before every job on such a cluster, and each job's entries would
make the next one's stale.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from snakeddp.data import remote
from snakeddp.data.source import Listing, remote_table, table_files
from snakeddp.errors import TableError, print_line
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.fsutil import stat_stamp as stamp
from snakeddp.util.hashing import sha256_file, sha256_json

# The workflow's hashes of its tables' files (relative to its directory): the plan writes it, ingestion reads it.
CACHE = ".snakemake/snakeddp/table-sha256.json"
# Files hashed at once while the workflow plans: the machine's cores, at most this many (a disk's limit).
MAX_THREADS = 4
# A stamp is trusted only for a file unchanged this long before it was hashed: file system times are coarse
# (a clock tick), so a write in the tick of the hash would otherwise leave the stamp as it was
# (snakeddp.data.partitions.VerifiedFiles does the same).
SETTLED_NS = 1_000_000_000
# Files to hash at the plan of this many bytes or more are said, before and after: Snakemake prints nothing while the
# Snakefile is read, and a 400 GB table new to the workflow is minutes of hashing (about 1.8 GB/s a core here).
SAY_HASHING_BYTES = 1 << 30


def _base(root: Path) -> Path:
    return root if root.is_dir() else root.parent


def _hashed(files: Sequence[Path]) -> list[str]:
    """Each file's sha256, several files at once."""
    threads = max(1, min(len(files), os.cpu_count() or 1, MAX_THREADS))
    if threads == 1:
        return [sha256_file(p) for p in files]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="snakeddp-table-hash") as pool:
        return list(pool.map(sha256_file, files))


def fingerprint(path: str | Path, fmt: str = "auto", listed: Listing | None = None) -> str:
    """sha256 over the table's files: each one's name relative to the table, size and sha256 (for a URL,
    each object's name, size and ETag: remote.fingerprint; ``listed``: its listing, if taken already)."""
    if remote.is_url(path):
        return remote.fingerprint(remote_table(str(path), fmt, listed)[1])
    root = Path(path)
    _, files = table_files(root, fmt)
    base = _base(root)
    digests = _hashed(files)
    return sha256_json(
        [[p.relative_to(base).as_posix(), p.stat().st_size, d] for p, d in zip(files, digests, strict=True)]
    )


def cached_fingerprint(path: str | Path, fmt: str, cache_file: str | Path, listed: Listing | None = None) -> str:
    """``fingerprint``, hashing only the files whose stamp changed since the last time (a new file, one
    rewritten, touched or replaced); the others' hashes come from ``cache_file``.

    The workflow computes it each time it starts (on Slurm, once per job), so a large table is
    hashed once, not on every start. A URL's listing is taken afresh each time (it reads no bytes).
    """
    if remote.is_url(path):
        return fingerprint(path, fmt, listed)
    root = Path(path)
    _, files = table_files(root, fmt)
    cache_path = Path(cache_file)
    cache = _read_cache(cache_path)
    keys = [str(p.resolve()) for p in files]
    before = [stamp(p) for p in files]
    todo = [i for i, key in enumerate(keys) if not same_file(cache.get(key, {}).get("stamp"), before[i])]
    started = time.time_ns()
    size = sum(before[i][2] for i in todo)
    said = size >= SAY_HASHING_BYTES
    if said:
        print_line(
            f"snakeddp: hashing {len(todo)} of {len(files)} files of {root} ({size / 1e9:,.1f} GB), new to this "
            f"workflow or changed since it last planned: their content names the dataset (kept in {cache_path})"
        )
    for i, digest in zip(todo, _hashed([files[i] for i in todo]), strict=True):
        if stamp(files[i]) != before[i]:
            raise TableError(
                f"{files[i]}: the file changed while it was hashed. HINT: rerun once the table is no longer "
                "being written."
            )
        settled = started - before[i][4] > SETTLED_NS
        cache[keys[i]] = {"stamp": before[i] if settled else None, "sha256": digest}
    if todo:
        kept = {key: entry for key, entry in cache.items() if key in keys or os.path.exists(key)}
        atomic_write_json(cache_path, {"files": kept})
    if said:
        print_line(f"snakeddp: hashed {root} in {(time.time_ns() - started) / 1e9:.1f} s")
    base = _base(root)
    return sha256_json(
        [
            [p.relative_to(base).as_posix(), s[2], cache[key]["sha256"]]
            for p, s, key in zip(files, before, keys, strict=True)
        ]
    )


def same_file(recorded: Any, now: list[int]) -> bool:
    """Whether a recorded stamp (device, inode, size, mtime, ctime) is ``now``'s but for the device."""
    return isinstance(recorded, list) and len(recorded) == len(now) and recorded[1:] == now[1:]


def _read_cache(path: Path) -> dict[str, Any]:
    """Resolved file path -> {stamp, sha256}; empty where there is no readable cache."""
    try:
        found = read_json(path).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return found if isinstance(found, dict) else {}


class Check:
    """A local table's identity checked while ingestion reads it, against the one the workflow planned with:
    each file is hashed on a thread while its rows are decoded (its bytes come from the page cache to
    whichever reads them second), and its stamp must be the same before and after, so the rows ingested are
    the bytes hashed. A table that changed since it was planned is refused before any partition is complete."""

    def __init__(self, path: str | Path, expected: str, cache: str | Path = CACHE) -> None:
        """``cache``: the plan's hashes (relative to the working directory: the workflow's, where jobs run)."""
        self.root, self.expected = Path(path), expected
        self.known = _read_cache(Path(cache))
        self.entries: list[list[Any]] = []
        self.hashed_again = 0  # files read whose plan's hash could not be taken (hashed while read)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snakeddp-table-check")

    @contextmanager
    def reading(self, files: Sequence[Path | str]) -> Iterator[None]:
        """The hashes of ``files`` (in order): the plan's where a file's stamp is the one it hashed, else hashed
        on a thread while the block reads them."""
        paths = [Path(p) for p in files]
        before = [stamp(p) for p in paths]
        known = [self._known(p, was) for p, was in zip(paths, before, strict=True)]
        self.hashed_again += known.count(None)
        hashing: Future[list[str]] = self._pool.submit(
            lambda: [sha256_file(p) for p, digest in zip(paths, known, strict=True) if digest is None]
        )
        yield  # a read that fails leaves the hash unwaited for (close)
        fresh = iter(hashing.result())
        digests = [digest or next(fresh) for digest in known]
        base = _base(self.root)
        for path, was, digest in zip(paths, before, digests, strict=True):
            if stamp(path) != was:
                raise TableError(
                    f"{path}: the file changed while it was read. HINT: rerun once the table is no longer being "
                    "written."
                )
            self.entries.append([path.relative_to(base).as_posix(), was[2], digest])

    def _known(self, path: Path, now: list[int]) -> str | None:
        """The plan's hash of ``path``, where the file's stamp is still the one the plan hashed (``same_file``)."""
        entry = self.known.get(str(path.resolve()))
        if isinstance(entry, dict) and same_file(entry.get("stamp"), now) and isinstance(entry.get("sha256"), str):
            return entry["sha256"]
        return None

    def finish(self) -> None:
        """A TableError unless the files read are the table the workflow planned with."""
        self._pool.shutdown()
        if sha256_json(self.entries) != self.expected:
            raise TableError(
                f"{self.root}: the table's checksum differs from data.table.sha256 (the table changed). "
                "HINT: restore the table, or clear data.table.sha256 to ingest the new one as a new dataset."
            )

    def close(self) -> None:
        """Stop hashing (an ingestion that stopped): a file being hashed is finished on its thread."""
        self._pool.shutdown(wait=False, cancel_futures=True)
