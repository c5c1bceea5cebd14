"""What a warm process imports, one module per turn of its loop (so no job waits for more than one
import), and which jobs wait for an import rather than make it beside the warm process (NEEDS)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

from snakeddp.forking.imports import import_once
from snakeddp.forking.safety import NotForkable
from snakeddp.util import handoff


class Stopping(BaseException):
    """A stop signal that came during an import, raised out of it: the loop would see the signal only
    after the import, and Lightning's takes 1-2 s, which a short workflow's Snakemake waited at its exit."""


class Imports:
    """``preload`` (of it, ``optional`` modules where installed), still to import in order, and ``needs``:
    what a job's step imports first thing, by step or by module."""

    def __init__(self, preload: Sequence[str], optional: frozenset[str], needs: dict[str, str]) -> None:
        self.pending = [m for m in preload if m not in optional or importlib.util.find_spec(m) is not None]
        self.required = set(preload) - optional
        self.needs = needs
        self.ready: str | None = None  # why nothing more is forked (an import or a fork check failed), else None
        self.importing = False  # inside warm_up's import: a stop signal raises Stopping there

    def due(self) -> bool:
        """Whether there is an import to make on this turn of the loop."""
        return bool(self.pending) and self.ready is None

    def warm_up(self) -> None:
        """Import one more module; a required one that fails leaves every later job cold."""
        module = self.pending.pop(0)
        self.importing = True
        try:
            import_once([module], entries=handoff.ENTRY_POINTS)
        except NotForkable as why:
            if module in self.required:
                self.ready = str(why)
        finally:
            self.importing = False

    def on_stop_signal(self, signum: int, frame: object) -> None:
        """Between imports the wake-up fd tells the loop; during one, the import ends here."""
        if self.importing:
            self.importing = False
            raise Stopping

    def need(self, request: dict[str, Any]) -> str | None:
        """What the job's step imports first thing, if it is preloaded (NEEDS: by step, or by module)."""
        module, argv = request["module"], request["argv"]
        return self.needs.get(f"{module} {argv[0]}" if argv else module) or self.needs.get(module)

    def must_wait(self, request: dict[str, Any]) -> bool:
        """Whether the job would import what this process is still to import (NEEDS)."""
        return self.ready is None and self.need(request) in self.pending
