"""Which finished runs are current and which are history: the one answer the report and `snakeddp runs` share.

A run is current when the config plans it: its id is a key of ``expand_sweep``, which is also the
list the report rule takes its runs from (rules/report.smk). Every other finished run directory
under results/runs (a run of an earlier sweep, another experiment) is history, like the earlier
attempts kept inside run directories.

`snakeddp runs` rebuilds the config from the flags snakemake was given (config/config.yaml beside
results/, each --configfile, then --config), rather than from a record the last workflow left:
the same flags give the same answer whether or not the workflow ran, and a dry run or a failed
run with other flags cannot leave a stale one behind. `snakeddp prune --data` asks the same flags which
datasets the config plans (``planned_datasets``), and keeps them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from snakeddp import config as configuration
from snakeddp.config import layers
from snakeddp.data import plan as data_plan

# Snakemake's configfile: directive in the Snakefile, relative to the directory the workflow runs in.
CONFIG_FILE = "config/config.yaml"


def planned(config: Mapping[str, Any], source: str = "config") -> list[str]:
    """The run ids ``config`` plans (config/config.yaml with the command line's layers on top), in the
    report's order."""
    return list(expanded(config, source))


def expanded(config: Mapping[str, Any], source: str = "config") -> dict[str, Any]:
    """The config validated and its sweep expanded: run id -> run."""
    return configuration.expand_sweep(configuration.validate(config, source=source), source=source)


def composed(workdir: str | Path, configfiles: Sequence[str | Path], entries: Sequence[str]) -> dict[str, Any] | None:
    """The config snakemake reads in ``workdir`` with these --configfile and --config flags; None when no config
    is known (no config/config.yaml there and no --configfile), as snakemake would refuse."""
    base_file = Path(workdir) / CONFIG_FILE
    if not base_file.is_file() and not configfiles:
        return None
    base = layers.load_layer(base_file) if base_file.is_file() else {}
    command_line = layers.command_line_config(entries)
    config = layers.compose(base, [*map(layers.load_layer, configfiles), command_line])
    # As the workflow's plan refuses it: a --config key the sweep sets would read as this config's runs here.
    layers.check_not_swept(command_line, config.get("sweep") or {})
    return config


def from_command_line(
    workdir: str | Path, configfiles: Sequence[str | Path], entries: Sequence[str]
) -> list[str] | None:
    """The run ids snakemake plans in ``workdir`` with these --configfile and --config flags; None
    when no config is known (no config/config.yaml there and no --configfile), as snakemake would refuse."""
    config = composed(workdir, configfiles, entries)
    return None if config is None else planned(config)


def planned_datasets(workdir: str | Path, configfiles: Sequence[str | Path], entries: Sequence[str]) -> set[str] | None:
    """The dataset ids (results/data/<id>/) the workflow plans in ``workdir`` with these flags, as its plan names
    them (snakeddp.workflow.plan: a table's checksum is part of its id); None when no config is known."""
    config = composed(workdir, configfiles, entries)
    if config is None:
        return None
    runs = expanded(config)
    # A table's path in the config is relative to the directory the workflow runs in, as is the workflow's cache
    # of its files' hashes (data.identity.CACHE: unchanged files are not read again).
    with contextlib.chdir(workdir):
        data_plan.resolve_tables(runs)
    return {configuration.dataset_id(run["config"]["data"]) for run in runs.values()}


def split(runs: Iterable[Any], current: Iterable[str]) -> tuple[list[Any], list[Any]]:
    """``runs`` (finished, each with a ``run_id``) as (current, history): current in the config's order."""
    order = {rid: i for i, rid in enumerate(current)}
    runs = list(runs)
    now = sorted((run for run in runs if run.run_id in order), key=lambda run: order[run.run_id])
    return now, [run for run in runs if run.run_id not in order]
