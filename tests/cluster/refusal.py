"""A folder to put first on a rank's PYTHONPATH: there ``import torch`` fails, so a process that is
refused before it imports torch says its one line, and one that imports it fails with this module's error."""

from __future__ import annotations

from pathlib import Path

IMPORTED = "torch was imported before the refusal"


def torch_unimportable(directory: Path) -> Path:
    """``directory``/no-torch, whose ``torch`` package raises ImportError(IMPORTED) when imported."""
    package = directory / "no-torch" / "torch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(f"raise ImportError({IMPORTED!r})\n")
    return package.parent
