"""A full disk or a spent quota, said in one line: what was being written, where, and the space left there.

A write that meets ENOSPC or EDQUOT is seldom the error that reaches the caller: torch.save's zip writer,
for one, raises its own RuntimeError ("unexpected pos") while it closes after the failed write, with the
OSError only as its context. ``full_disk`` finds the OSError in that chain; ``NoSpaceError`` keeps its
errno, so code that catches OSError behaves as before.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FULL = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded"}


class NoSpaceError(OSError):
    """A write stopped by a full filesystem or a quota; ``str()`` is the whole line, with its HINT."""

    def __init__(self, code: int, line: str, path: str) -> None:
        super().__init__(code, line, path)
        self.line = line

    def __str__(self) -> str:
        return self.line


def full_disk(error: BaseException | None) -> OSError | None:
    """The ENOSPC or EDQUOT OSError that ``error`` is, or was raised from or while handling."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in FULL:
            return error
        error = error.__cause__ or error.__context__
    return None


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _mount_point(path: Path) -> Path:
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def space_left(path: str | Path) -> str:
    """Say "12.0 KiB free of 4.0 MiB on /scratch" for the filesystem that holds ``path`` (or its nearest parent)."""
    place = Path(os.path.abspath(path))
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        usage = shutil.disk_usage(place)
    except OSError:
        return f"the free space on {place} unknown"
    return f"{_size(usage.free)} free of {_size(usage.total)} on {_mount_point(place)}"


def _shown(path: str | Path) -> str:
    """``path`` as the user typed it: relative to the working directory (the checkout) where it is under it."""
    relative = os.path.relpath(os.path.abspath(path))
    return str(path) if relative.startswith("..") else relative


def no_space(error: OSError, path: str | Path, what: str | None = None) -> NoSpaceError:
    """The one line for ``error`` (a full disk or quota, as ``full_disk`` found it) met writing ``path``."""
    code = error.errno if error.errno in FULL else errno.ENOSPC
    writing = f"{what} {_shown(path)}" if what else _shown(path)
    remedy = "free space there" if code == errno.ENOSPC else "free space within your quota there or have it raised"
    line = (
        f"{FULL[code]} writing {writing} ({space_left(path)}). HINT: {remedy}, then run the same command "
        "again: what was finished is kept, and training resumes from its last checkpoint."
    )
    return NoSpaceError(code, line, str(path))


@contextmanager
def said_when_full(path: str | Path, what: str) -> Iterator[None]:
    """A full disk or quota met inside the block, said as writing ``what`` ``path``, for writers that stream
    into files of their own (a table's partitions); the block cleans up first, so the space left is counted
    without its partial files."""
    try:
        yield
    except Exception as error:
        full = full_disk(error)
        if full is None or isinstance(full, NoSpaceError):
            raise
        raise no_space(full, path, what) from error
