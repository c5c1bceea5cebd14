"""Which finished runs are current and which are history: the one answer the report and `snakeddp runs` share.

A run is current when the config plans it: its id is a key of ``expand_sweep``, which is also the
list the report rule takes its runs from (rules/report.smk). Every other finished run directory
under results/runs (a run of an earlier sweep, another experiment) is history, like the earlier
attempts kept inside run directories. A finished run directory the config plans is current only when its
attempt trained the config's run (``Planned.trained``): after an edit, and before snakemake trains the run
again, it holds an attempt of another config, and is history.

`snakeddp runs` rebuilds the config from the flags snakemake was given (config/config.yaml beside
results/, each --configfile, then --config), rather than from a record the last workflow left:
the same flags give the same answer whether or not the workflow ran, and a dry run or a failed
run with other flags cannot leave a stale one behind. `snakeddp prune --data` asks the same flags which
datasets the config plans (``planned_datasets``), and keeps them.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snakeddp import config as configuration
from snakeddp.config import layers
from snakeddp.data import plan as data_plan

# Snakemake's configfile: directive in the Snakefile, relative to the directory the workflow runs in.
CONFIG_FILE = "config/config.yaml"


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
    config = layers.remove_nulled(
        layers.compose(base, [*map(layers.load_layer, configfiles), command_line]), command_line
    )
    # As the workflow's plan refuses it: a --config key the sweep sets would read as this config's runs here.
    layers.check_not_swept(command_line, config.get("sweep") or {})
    return config


# What the workflow fills in a table's config from its files when it plans a run (data.plan.resolve_tables), where
# the config leaves it open. `snakeddp runs` fills them as the workflow does for a table on this machine
# (``resolve_local_tables``: a stat per file while the workflow's cache of their hashes holds them), so a table
# edited in place makes its runs history, as it makes snakemake train them again; a table in object storage is
# not listed (a request per call), and left open, as is any key of a table it cannot read (the workflow says why).
TABLE_FILLED = ("sha256", "table_id", "version")
# Filled when data.table.features is empty, the keys that chose them reset.
TABLE_FEATURES = ("features", "feature_pattern", "exclude")


@dataclass(frozen=True)
class Planned:
    """The runs a config plans and what each is: run id -> its sweep point and run config (``expanded``)."""

    runs: dict[str, Any]
    # Each rung of a search trains its runs to the rung's budget, not trainer.max_epochs (run.search).
    searched: bool = False

    @property
    def ids(self) -> list[str]:
        """The planned run ids, in the report's order."""
        return list(self.runs)

    def trained(self, record: Mapping[str, Any]) -> bool:
        """Whether a finished attempt's record (its provenance) is of the run the config plans under its id: the
        same run config as run.yaml would hold, as the workflow tells one that must train again
        (``runfile.rewrites``): scheduler requests aside, the recorded config read as run.yaml is read."""
        run = self.runs.get(record.get("run_id"))
        if run is None:
            return False
        try:
            recorded = configuration.run_config(configuration.validate(record.get("config") or {}))
        except configuration.ConfigError:  # a record of a config this version does not read: not this config's
            return False
        return self._identity(recorded, run["config"]) == self._identity(run["config"], run["config"])

    def _identity(self, config: Mapping[str, Any], planned: Mapping[str, Any]) -> dict[str, Any]:
        identity = configuration.run_identity(config)
        if self.searched:
            identity.get("trainer", {}).pop("max_epochs", None)
        table, chosen = identity.get("data", {}).get("table"), planned.get("data", {}).get("table")
        if isinstance(table, dict) and isinstance(chosen, dict):
            left_open = [key for key in TABLE_FILLED if not chosen.get(key)]
            for key in left_open + ([] if chosen.get("features") else list(TABLE_FEATURES)):
                table.pop(key, None)
        return identity


def planned_from_command_line(
    workdir: str | Path, configfiles: Sequence[str | Path], entries: Sequence[str], tables: bool = True
) -> Planned | None:
    """The runs snakemake plans in ``workdir`` with these --configfile and --config flags; None when no config is
    known (no config/config.yaml there and no --configfile), as snakemake would refuse. ``tables``: with what the
    workflow fills in from a local table's files (``resolve_local_tables``); without, only the ids are right."""
    config = composed(workdir, configfiles, entries)
    if config is None:
        return None
    validated = configuration.validate(config)
    runs = configuration.expand_sweep(validated)
    if tables:
        # Relative to the directory the workflow runs in, as its cache of the files' hashes is.
        with contextlib.chdir(workdir):
            resolve_local_tables(runs)
    return Planned(runs, searched=bool(validated.get("search")))


def resolve_local_tables(runs: Mapping[str, Any]) -> None:
    """Fill in each run's local table (in place) as the workflow's plan does (``data.plan.resolve_tables``: its
    checksum; a Delta table's id and version; features left empty), once per table the runs share. The files'
    hashes come from the workflow's cache while their stat stamps are unchanged, so an unchanged table costs a stat
    per file; a file changed since is hashed, once, as the workflow's next start would (the cache is its). A table in
    object storage, or one the plan refuses (gone, a column missing: the workflow says so), is left as configured."""
    from snakeddp.data.remote import is_url

    resolved: dict[str, dict[str, Any] | None] = {}
    for run_id, run in runs.items():
        data = run["config"]["data"]
        if data.get("source") != "table" or is_url(str(data["table"]["path"])):
            continue
        key = json.dumps(data, sort_keys=True, default=str)
        if key not in resolved:
            alone = {run_id: {"config": {"data": copy.deepcopy(data)}}}
            try:
                data_plan.resolve_tables(alone)
                resolved[key] = alone[run_id]["config"]["data"]
            except (configuration.ConfigError, OSError):
                resolved[key] = None
        if resolved[key] is not None:
            run["config"]["data"] = copy.deepcopy(resolved[key])


def from_command_line(
    workdir: str | Path, configfiles: Sequence[str | Path], entries: Sequence[str]
) -> list[str] | None:
    """The run ids snakemake plans in ``workdir`` with these --configfile and --config flags; None
    when no config is known (no config/config.yaml there and no --configfile), as snakemake would refuse."""
    runs = planned_from_command_line(workdir, configfiles, entries, tables=False)
    return None if runs is None else runs.ids


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


def split(runs: Iterable[Any], planned: Planned) -> tuple[list[Any], list[Any]]:
    """``runs`` (finished, each with a ``run_id`` and its ``provenance``) as (current, history): current those the
    config plans that trained its run (``Planned.trained``), in the config's order."""
    order = {rid: i for i, rid in enumerate(planned.ids)}
    runs = list(runs)
    now = [run for run in runs if run.run_id in order and planned.trained(run.provenance)]
    chosen = {id(run) for run in now}
    return sorted(now, key=lambda run: order[run.run_id]), [run for run in runs if id(run) not in chosen]
