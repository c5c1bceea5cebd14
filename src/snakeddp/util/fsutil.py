"""Atomic file writes: a reader sees the old file or the complete new one, never a partial one.

Nothing here writes through an existing file: a target that is a hard link to someone else's file
(a user's config placed in a crate, an ingested partition) is replaced, never overwritten in place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from snakeddp.errors import said_when_full


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


# mkstemp creates files 0600; finished files get the mode a plain open() would give them.
_FILE_MODE = 0o666 & ~_umask()


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None], what: str | None = None) -> Path:
    """Call ``write`` on a temporary file next to ``path``, fsync it, then rename it into place.

    A full disk or quota ends in NoSpaceError, whose line names ``what`` (say "the checkpoint") and
    ``path``, and the space left once the temporary file is gone."""
    path = Path(path)
    with said_when_full(path, what):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    with said_when_full(path, what):
        try:
            with os.fdopen(fd, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, _FILE_MODE)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def append_whole(path: str | Path, data: bytes, what: str | None = None) -> None:
    """Append ``data`` to ``path`` (created if missing) whole or not at all: a failed write (a full disk, said
    as NoSpaceError) cuts the file back to where it ended, so no half record stays in it."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        end = os.fstat(fd).st_size
        view = memoryview(data)
        with said_when_full(path, what):
            try:
                while view:
                    view = view[os.write(fd, view) :]
            except OSError:
                os.ftruncate(fd, end)
                raise
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    return atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, value: Any) -> Path:
    return atomic_write_text(path, json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n")


def copy_file(source: str | Path, target: str | Path) -> Path:
    """Copy ``source`` to ``target`` atomically (a new file: links to the old target keep their content)."""
    with open(source, "rb") as data:
        return atomic_write(target, lambda handle: shutil.copyfileobj(data, handle))


def link_or_copy(source: str | Path, target: str | Path) -> Path:
    """Put ``source`` at ``target`` as a hard link (no copy of large files) where the filesystem allows,
    else as an atomic copy; an existing ``target`` is replaced, never written through."""
    source, target = Path(source).resolve(), Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and target.samefile(source):
        return target
    staged = target.with_name(f".{target.name}.{os.getpid()}.link")
    staged.unlink(missing_ok=True)
    try:
        os.link(source, staged)
    except OSError:  # another filesystem, or one without hard links
        return copy_file(source, target)
    os.replace(staged, target)
    return target


def tree_size(folder: str | Path) -> int:
    """The bytes of every file under ``folder``, links counted as themselves (not followed): what removing it frees."""
    total = 0
    for parent, _, files in os.walk(folder):
        total += sum(os.lstat(os.path.join(parent, name)).st_size for name in files)
    return total


def stat_stamp(path: str | Path) -> list[int]:
    """What changes whenever a file's bytes do: its device, inode, size, mtime and ctime (a write, a rename,
    a link and ``utime`` all move the ctime, and no call sets it back)."""
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
