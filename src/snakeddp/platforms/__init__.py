"""The platforms, one row each: where a run's ranks start and what the workflow does for it there.

A row says what the rest of snakeddp asks of a platform by name: its config section, what
``launch.launcher: auto`` means there, the launchers only it can run, and whether jobs run on the machine
Snakemake runs on (``this_machine``); whether a train job submits the run elsewhere is its contract's class
(``contract.RemotePlatform``). What a platform does is in its own package, in two halves the
row names: its contract (``snakeddp.contract``, a floor above: the workflow side, its checks before any job,
what it exports to jobs, how a train job runs there) and its job side (``snakeddp.platforms.jobside``:
what its jobs and ranks see, its launchers, the variables it sets and provenance records).

This module is the registry: the one place below the platforms that finds them, by row. Code on a
lower floor asks it ("the variables every platform records", "the launcher called srun", "this rank's
node") and never names a platform. Rows come from the table (``table``) and from installed packages'
``snakeddp.platforms`` entry points (each a ``Row``), so a package adds a platform without editing
snakeddp. A new platform is its package, a profile, a schema section and a row: docs/development.md
says so step by step. Imports nothing of snakeddp but errors; a platform's modules load only when asked.

May import: ``errors`` (the floors below its own: tests/test_floors.py).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from snakeddp.errors import ConfigError
from snakeddp.platforms.jobside import Allocation, JobSide
from snakeddp.platforms.table import TABLE, Row

__all__ = [
    "TABLE",
    "Allocation",
    "ConfigError",
    "JobSide",
    "Row",
    "allocation",
    "by_name",
    "homes",
    "job_id",
    "job_side",
    "launch_records",
    "launchers",
    "load",
    "multi_node",
    "names",
    "node_count",
    "node_count_variables",
    "placement",
    "recorded_names",
    "rendezvous",
    "row",
    "rows",
    "scheduler_node",
]

#: The entry-point group an installed package adds a platform with: ``NAME = "its_module:ROW"``.
ENTRY_POINTS = "snakeddp.platforms"


@functools.cache
def rows() -> tuple[Row, ...]:
    """Every platform: the table's, then those installed packages add (a name the table has stays the table's)."""
    added = []
    for point in sorted(entry_points(group=ENTRY_POINTS), key=lambda point: point.name):
        found = point.load()
        if not isinstance(found, Row) or found.name != point.name:
            raise ConfigError(
                f"the {ENTRY_POINTS} entry point {point.name} = {point.value} is not a snakeddp.platforms.Row "
                f"named {point.name!r}. HINT: point it at the platform's Row (snakeddp.platforms.table.Row)."
            )
        if found.name not in {row.name for row in TABLE}:
            added.append(found)
    return (*TABLE, *added)


def by_name() -> dict[str, Row]:
    return {row.name: row for row in rows()}


def names() -> tuple[str, ...]:
    return tuple(row.name for row in rows())


def row(name: str) -> Row:
    try:
        return by_name()[name]
    except KeyError:
        raise ConfigError(
            f"unknown platform {name!r}. HINT: run with one of the profiles {', '.join(names())} "
            "(snakemake --profile NAME), which set it."
        ) from None


def homes(launcher: str) -> tuple[Row, ...]:
    """The platforms that own ``launcher`` (empty: it runs on any that takes other launchers)."""
    return tuple(row for row in rows() if launcher in row.own_launchers)


def load(name: str) -> Any:
    """The platform's contract (a snakeddp.contract.Platform, a floor above this one), imported now: a
    platform's modules load only where it runs."""
    return importlib.import_module(row(name).module).CONTRACT


@functools.cache
def job_side(name: str) -> JobSide:
    """The platform's job side (a light module: ranks import every platform's)."""
    module = row(name).job_side
    return JobSide() if module is None else importlib.import_module(module).JOB_SIDE


def ingester(name: str) -> Any:
    """The platform's ingestion of a table on its cluster (its row's ``ingest``), imported now; None where
    the ingest step reads the table itself."""
    if row(name).ingest is None:
        return None
    module, _, function = row(name).ingest.partition(":")
    return getattr(importlib.import_module(module), function)


def _job_sides() -> list[JobSide]:
    return [job_side(row.name) for row in rows()]


def recorded_names() -> frozenset[str]:
    """The variables of every platform that provenance records."""
    return frozenset().union(*(side.recorded for side in _job_sides()))


def _first(env: Mapping[str, str], variables: tuple[str, ...]) -> str | None:
    return next((env[name] for name in variables if env.get(name)), None)


def scheduler_node(env: Mapping[str, str]) -> str | None:
    """The scheduler's name of the node this rank runs on, where its platform gives one."""
    return next(filter(None, (_first(env, side.node_variables) for side in _job_sides())), None)


def job_id(env: Mapping[str, str]) -> str | None:
    """The id of the platform's job this process runs in, where it gives one."""
    return next(filter(None, (_first(env, side.job_id_variables) for side in _job_sides())), None)


def node_count(env: Mapping[str, str]) -> int | None:
    """The number of nodes of the platform's job this process runs in, where it gives one."""
    found = next(filter(None, (_first(env, side.node_count_variables) for side in _job_sides())), None)
    return int(found) if found and found.isdigit() else None


def node_count_variables() -> tuple[str, ...]:
    return tuple(name for side in _job_sides() for name in side.node_count_variables)


def launchers() -> dict[str, str]:
    """The launchers platforms own: name -> ``module:Class``."""
    return {name: target for side in _job_sides() for name, target in side.launchers.items()}


def multi_node() -> tuple[str, ...]:
    """The platforms whose runs may span more than one node."""
    return tuple(row.name for row in rows() if job_side(row.name).multi_node)


def allocation(env: Mapping[str, str]) -> Allocation | None:
    """The scheduler's job this process runs inside (mpirun starts its daemons through it); None outside any."""
    return next(filter(None, (side.allocation(env) for side in _job_sides())), None)


def rendezvous(env: Mapping[str, str]) -> tuple[str | None, int | None]:
    """Rank 0's address and port as the platform this process runs on exports them; (None, None) elsewhere."""
    return next(
        (found for found in (side.rendezvous(env) for side in _job_sides()) if found[0] is not None), (None, None)
    )


def placement(env: Mapping[str, str]) -> dict[str, Any] | None:
    """Where the platform placed this rank beyond its host (provenance's ranks[].executor); None elsewhere."""
    return next(filter(None, (side.placement(env) for side in _job_sides())), None)


def launch_records(env: Mapping[str, str], ranks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What provenance's launch section records of each platform the run ran on, under its name."""
    records = {row.name: job_side(row.name).launch_record(env, ranks) for row in rows()}
    return {name: record for name, record in records.items() if record is not None}
