"""The platforms, one row each: where a run's ranks start and what the workflow does for it there.

A row says what the rest of snakeddp asks of a platform by name: its config section, what
``launch.launcher: auto`` means there, the launchers only it can run, whether a train job submits
the run elsewhere (``remote``) or starts its ranks itself, and whether jobs run on the machine
Snakemake runs on (``this_machine``). What a platform does (its checks before any job, what it
exports to jobs, how a train job runs there) is its contract (``snakeddp.platforms.contract``),
implemented in its own package and imported only when the workflow or a job runs on it.

A new platform is its package (with a ``platform`` module), a profile, a schema section and a row
here: docs/development.md says so step by step. Pure data: imports nothing of snakeddp but errors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from snakeddp.errors import ConfigError
from snakeddp.platforms.table import BY_NAME, TABLE, Row, homes, row

if TYPE_CHECKING:
    from snakeddp.platforms.contract import Platform

__all__ = ["BY_NAME", "TABLE", "ConfigError", "Row", "homes", "load", "row"]


def load(name: str) -> Platform:
    """The platform's contract, imported now: a platform's modules load only where it runs."""
    return importlib.import_module(row(name).module).CONTRACT
