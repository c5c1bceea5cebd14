"""Configurations: runs that differ only in their seed, taken together (configurations.csv, the page).

A sweep over learning rates x seeds asks "which learning rate?", and one seed's luck must not
answer it: each configuration gets the mean, the spread and the count of every number its runs'
metrics give (table.outcome_columns), and "best" ranks configurations by the mean of the monitored
metric. Light (no pandas, no matplotlib): the Snakefile asks ``numeric_keys`` whether the report
draws the metric-vs-hyperparameter figure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snakeddp.config import flatten, run_identity
from snakeddp.report.table import Column, Rows, outcome_columns, varying_params, write_csv
from snakeddp.run.runs import Run
from snakeddp.util.hashing import canonical_json

SEED = "seed"
# What "spread" means on the page, in configurations.csv and in the figures' error bars.
SPREAD_MEANS = "sample standard deviation across seeds (n - 1 in the denominator; none for one seed)"
# A numeric axis is logarithmic when its values span this factor (two decades) or more.
DECADES = 100


@dataclass(frozen=True)
class Spread:
    """Mean, sample standard deviation and count of one number over a configuration's runs."""

    mean: float | None
    std: float | None
    count: int
    low: float | None
    high: float | None


def spread(values: Iterable[Any]) -> Spread:
    """Over the finite numbers among ``values`` (a run without the metric, or a NaN epoch, counts for none)."""
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    numbers = [v for v in numbers if math.isfinite(v)]
    if not numbers:
        return Spread(None, None, 0, None, None)
    std = statistics.stdev(numbers) if len(numbers) > 1 else None
    return Spread(statistics.fmean(numbers), std, len(numbers), min(numbers), max(numbers))


@dataclass(frozen=True)
class Configuration:
    """The runs of one configuration; ``params``: its values of the keys that vary between configurations."""

    name: str
    params: dict[str, Any]
    runs: tuple[Run, ...]

    @property
    def seeds(self) -> list[Any]:
        return [run.provenance["config"].get(SEED) for run in self.runs]

    @property
    def monitor(self) -> dict[str, str] | None:
        """The metric and mode its runs rank by, when they share one."""
        monitors = {canonical_json(run.monitor) for run in self.runs}
        return self.runs[0].monitor if len(monitors) == 1 else None

    def of(self, column: Column) -> Spread:
        return spread(column.read(run) for run in self.runs)

    @property
    def score(self) -> Spread:
        """The monitored metric at each run's best epoch, over the runs."""
        return spread(run.best_score for run in self.runs)


def _identity(run: Run) -> str:
    """What a run computes, its seed left out (and the scheduler's requests, which change nothing)."""
    config = flatten(run_identity(run.provenance["config"]))
    config.pop(SEED, None)
    return canonical_json(config)


def _short(keys: Sequence[str]) -> dict[str, str]:
    """The last part of each dotted key (lr for model.lr), the whole key where two would share it."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return {key: name if last.count(name) == 1 else key for key, name in zip(keys, last, strict=True)}


def group(runs: Sequence[Run]) -> list[Configuration]:
    """The configurations of ``runs`` in the order of their first run, each named after the values
    of the keys that vary between them (``lr=0.003``); a single one after its run, or "all runs"."""
    # Scheduler requests (launch.runtime) may vary without making another configuration.
    computed = set().union(*(flatten(run_identity(run.provenance["config"])) for run in runs)) if runs else set()
    keys = [key for key in varying_params([run.provenance for run in runs]) if key != SEED and key in computed]
    members: dict[str, list[Run]] = {}
    for run in runs:
        members.setdefault(_identity(run), []).append(run)
    short = _short(keys)
    found = []
    for group_runs in members.values():
        params = _params(group_runs, keys)
        name = ", ".join(f"{short[key]}={_value(value)}" for key, value in params.items())
        if not name:
            name = group_runs[0].run_id if len(group_runs) == 1 else "all runs"
        found.append(Configuration(name, params, tuple(group_runs)))
    return found


def _params(runs: Sequence[Run], keys: Sequence[str]) -> dict[str, Any]:
    return {key: flatten(runs[0].provenance["config"]).get(key) for key in keys}


def _value(value: Any) -> str:
    return canonical_json(value) if isinstance(value, list | dict) else str(value)


def ranked(configurations: Sequence[Configuration]) -> list[Configuration]:
    """The configurations that have a score, best mean first, when all rank by the same metric and mode
    (means of different metrics do not compare: then none). Equal means: more seeds first, then the
    smaller spread, then the name, so the order never depends on the order of the runs."""
    scored = [c for c in configurations if c.score.mean is not None and c.monitor is not None]
    if not scored or len({canonical_json(c.monitor) for c in scored}) > 1:
        return []
    sign = 1 if scored[0].monitor["mode"] == "min" else -1
    return sorted(scored, key=lambda c: (sign * c.score.mean, -c.score.count, c.score.std or 0.0, c.name))


def tied(best: Configuration, configurations: Sequence[Configuration]) -> list[str]:
    """The other configurations whose mean score equals the best's."""
    return [c.name for c in configurations if c is not best and c.score.mean == best.score.mean]


def numeric_keys(points: Sequence[Mapping[str, Any]]) -> list[str]:
    """The swept keys, seed aside, whose values are all numbers and take more than one: a figure of
    the monitored metric against each (``points``: the runs' sweep points, provenance ``sweep_point``)."""
    keys = list(dict.fromkeys(key for point in points for key in point if key != SEED))
    numeric = []
    for key in keys:
        values = [point.get(key) for point in points]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values) and len(set(values)) > 1:
            numeric.append(key)
    return numeric


def log_axis(values: Iterable[float]) -> bool:
    """Whether an axis of these values reads better logarithmic: all positive, spanning two decades."""
    values = list(values)
    return bool(values) and min(values) > 0 and max(values) / min(values) >= DECADES


def table(runs: Sequence[Run], configurations: Sequence[Configuration]) -> Rows:
    """One row per configuration: its parameters (``param:<key>``), how many seeds, which runs, the
    metric it ranks by, then ``<column>:mean`` and ``<column>:sample_std`` of every outcome column."""
    keys = list(configurations[0].params) if configurations else []
    columns = outcome_columns(runs)
    header = ["configuration", *(f"param:{key}" for key in keys), "seeds", "runs", "monitor"]
    header += [f"{column.name}:{part}" for column in columns for part in ("mean", "sample_std")]
    rows = []
    for config in configurations:
        monitor = config.monitor
        row = [config.name, *(config.params[key] for key in keys), len(config.runs)]
        row += [
            " ".join(run.label for run in config.runs),
            f"{monitor['metric']} ({monitor['mode']})" if monitor else "",
        ]
        for column in columns:
            measured = config.of(column)
            row += [measured.mean, measured.std]
        rows.append(row)
    return Rows(header, rows)


def write_table(runs: Sequence[Run], out: str | Path) -> Rows:
    """configurations.csv beside runs.csv."""
    return write_csv(table(runs, group(runs)), out)
