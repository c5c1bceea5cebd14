"""torchmetrics without the optional packages its own import pulls in, for a training process.

Lightning imports torchmetrics, and importing torchmetrics imports every optional package of its metrics
that it finds installed, whether a run computes those metrics or not: transformers for BERTScore and
InfoLM (about 3 s of a rank's 10.2 s of imports on the GPU image of bench 15, where the image has it) and
matplotlib for its metrics' ``plot`` methods. ``import_torchmetrics`` imports torchmetrics with those
packages hidden from it, and only from it: while it imports, their modules and distributions look
absent (torchmetrics asks ``importlib.metadata`` and ``find_spec``); afterwards they import as usual for
whoever asks, a user's model included. The price: in that process torchmetrics' BERTScore, InfoLM and
CLIPScore and its ``plot`` methods say their package is missing. No upstream file is changed.

Call it before Lightning is imported; where torchmetrics is imported already it does nothing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.metadata
import re
import sys
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

#: What torchmetrics imports as it is imported, for metrics a training run of snakeddp's models never computes.
TORCHMETRICS_EXTRAS = frozenset({"transformers", "matplotlib"})


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class _Hidden(importlib.abc.MetaPathFinder):
    """First on sys.meta_path while installed: the packages ``names`` are not there, as modules or
    distributions; every other lookup goes on to the finders after it."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        self.distributions = frozenset(_normalized(name) for name in self.names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None

    def find_distributions(self, context: Any = None) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if name is not None and _normalized(name) in self.distributions:
            raise importlib.metadata.PackageNotFoundError(name)
        return iter(())


def import_torchmetrics(hidden: Iterable[str] = TORCHMETRICS_EXTRAS) -> ModuleType:
    """torchmetrics, imported (once per process) with the packages ``hidden`` out of its sight."""
    if "torchmetrics" in sys.modules:
        return sys.modules["torchmetrics"]
    finder = _Hidden(name for name in hidden if name not in sys.modules)
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module("torchmetrics")
    finally:
        sys.meta_path.remove(finder)
