"""Paths read from files (manifests, provenance records, run state) are names inside a directory,
never a way out of it: an absolute name, a ``..`` or a link that leads elsewhere is refused."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any


def inside(root: str | Path, name: Any) -> Path | None:
    """``root / name`` when ``name`` is a relative path that stays under ``root`` with links
    followed, else None (the caller says what was wrong in its own words)."""
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        return None
    parts = PurePosixPath(name).parts
    if PurePosixPath(name).is_absolute() or ".." in parts or not parts:
        return None
    root = Path(root)
    path = root.joinpath(*parts)
    if not path.resolve().is_relative_to(root.resolve()):
        return None
    return path
