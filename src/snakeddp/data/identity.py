"""A table's identity, which becomes part of its dataset's id and of every run config that trains on it: a
changed table is a new dataset.

A local table's identity is the sha256 over its files' names (relative to the table), sizes and sha256s; a
table in object storage's is its objects' listing (snakeddp.data.remote.fingerprint); a Delta table's is its
table id, version and data files (snakeddp.data.delta).
"""

from __future__ import annotations

from pathlib import Path

from snakeddp.data import remote
from snakeddp.data.source import Listing, remote_table, table_files
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.hashing import sha256_file, sha256_json


def fingerprint(path: str | Path, fmt: str = "auto", listed: Listing | None = None) -> str:
    """sha256 over the table's files: each one's name relative to the table, size and sha256 (for a URL,
    each object's name, size and ETag: remote.fingerprint; ``listed``: its listing, if taken already)."""
    if remote.is_url(path):
        return remote.fingerprint(remote_table(str(path), fmt, listed)[1])
    root = Path(path)
    _, files = table_files(root, fmt)
    base = root if root.is_dir() else root.parent
    return sha256_json([[p.relative_to(base).as_posix(), p.stat().st_size, sha256_file(p)] for p in files])


def cached_fingerprint(path: str | Path, fmt: str, cache_file: str | Path, listed: Listing | None = None) -> str:
    """``fingerprint``, reusing the last result while no file's size, mtime or inode changed.

    The workflow computes it each time it starts (on Slurm, once per job), so a large table is
    hashed once, not on every start. A URL's listing is taken afresh each time (it reads no bytes).
    """
    if remote.is_url(path):
        return fingerprint(path, fmt, listed)
    root = Path(path)
    _, files = table_files(root, fmt)
    stamp = sha256_json([[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ino] for p in files])
    cache_path = Path(cache_file)
    try:
        cache = read_json(cache_path)
    except (OSError, ValueError):
        cache = {}
    key = str(root.resolve())
    if cache.get(key, {}).get("stamp") == stamp:
        return cache[key]["sha256"]
    digest = fingerprint(root, fmt)
    cache[key] = {"stamp": stamp, "sha256": digest}
    atomic_write_json(cache_path, cache)
    return digest
