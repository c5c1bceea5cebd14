"""The table of runs: its columns defined once, for runs.csv, the terminal, the page and ``compare``.

A column has a name (the runs.csv header and JSON key), a label for people, and how to read it
from a finished run (its provenance record and metrics.csv). runs.csv takes every column;
the people's table (``snakeddp runs`` and report.html) and compare's outcome pick theirs by name.

Plain rows and the csv module, not pandas: the report job and ``snakeddp runs`` only write and
print a few rows, and importing pandas (with pyarrow) was a third of the report's start-up
(bench/results.md, 8.).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from snakeddp.config import flatten
from snakeddp.config.monitor import FALLING, RISING
from snakeddp.run import account
from snakeddp.run.runs import Run, metric_order
from snakeddp.run.tries import LOSSES
from snakeddp.util.fsutil import atomic_write_text
from snakeddp.util.hashing import canonical_json
from snakeddp.util.numbers import readable

# What "samples/s" means wherever the report, runs.csv or the terminal shows it.
THROUGHPUT_MEANS = (
    "training samples per second of the training loop (validation excluded), all ranks together, "
    "median over the epochs after the first (the first pays for start-up)"
)
# Where the training process's wall time goes, once it records timing.phases (provenance schema).
PHASES = {
    "startup_s": "start-up",
    "train_loop_s": "training loop",
    "validation_s": "validation",
    "checkpoint_s": "checkpoints",
    "epoch_ends_s": "epoch ends",
    "teardown_s": "teardown",
    "total_s": "total",
}


def steady_throughput(run: Run) -> tuple[float, float, float] | None:
    """Median, min and max samples/s over the epochs after the first (see THROUGHPUT_MEANS)."""
    values = [float(r["samples_per_s"]) for r in run.metrics if r.get("samples_per_s") is not None]
    if len(values) > 1:
        values = values[1:]
    return (statistics.median(values), min(values), max(values)) if values else None


def _throughput(run: Run) -> float | None:
    measured = steady_throughput(run)
    return measured[0] if measured else None


def _phase(name: str) -> Callable[[Run], float | None]:
    return lambda run: (run.provenance["timing"].get("phases") or {}).get(name)


def _goodput(run: Run) -> dict[str, Any]:
    """timing.goodput: every try's wall time and what hangs, preemptions and failures lost (none in older records)."""
    return run.provenance["timing"].get("goodput") or {}


def _lost(outcome: str, key: str) -> Callable[[Run], Any]:
    """What the tries that ended ``outcome`` lost (0 where none did, None in records before tries were kept)."""
    return lambda run: ((_goodput(run).get("lost") or {}).get(outcome) or {}).get(key, 0) if _goodput(run) else None


def _lost_steps(run: Run) -> int | None:
    """Steps trained again, all endings together (None where a try's reach is unknown: a crash)."""
    steps = [loss["steps"] for loss in (_goodput(run).get("lost") or {}).values()]
    return None if not _goodput(run) or None in steps else sum(steps)


def _account(run: Run) -> dict[str, Any]:
    """timing.goodput.account: the tries' seconds by Goodput's buckets, queue wait and GPU-hours (none in older
    records)."""
    return _goodput(run).get("account") or {}


def _bucket(name: str) -> Callable[[Run], float | None]:
    return lambda run: (_account(run).get("buckets") or {}).get(name)


def _said(name: str) -> str:
    return name.removesuffix("_s").replace("_", " ") + " s"


# The buckets whose plain name reads like another column's: disruption_lost_s is the productive (step) seconds after
# a try's last save, where lost_<kind>_s is all of that try's wall time after it.
BUCKET_LABELS = {"disruption_lost_s": "step time lost to disruption s"}


def _queue_wait(run: Run) -> float | str | None:
    """The tries' queue wait, "not known" where the platform cannot tell one (never a guess)."""
    return account.shown(_account(run)["queue_wait_s"]) if _account(run) else None


def _tries_accounts(run: Run) -> list[dict[str, Any]] | None:
    """Every try's account, with its number, outcome and seconds (provenance attempt.tries)."""
    tried = (run.provenance.get("attempt") or {}).get("tries") or []
    kept = [
        {"number": t["number"], "outcome": t["outcome"], "seconds": t["seconds"], **t["account"],
         "queue_wait_s": account.shown(t["account"]["queue_wait_s"])}
        for t in tried
        if t.get("account")
    ]  # fmt: skip
    return kept or None


def _goodput_shown(run: Run) -> str:
    ratio = _goodput(run).get("ratio")
    return "" if ratio is None else f"{ratio:.0%}"


@dataclass(frozen=True)
class Column:
    """One column of the runs table; ``show`` is how people read it when the raw value reads poorly."""

    name: str
    label: str
    read: Callable[[Run], Any]
    show: Callable[[Run], Any] | None = None

    def shown(self, run: Run) -> Any:
        return (self.show or self.read)(run)


def _training(key: str) -> Callable[[Run], Any]:
    return lambda run: run.provenance["training"][key]


def _launch(key: str) -> Callable[[Run], Any]:
    return lambda run: run.provenance["launch"][key]


def _epochs_of_max(run: Run) -> str:
    return f"{run.provenance['training']['epochs_completed']}/{run.provenance['training']['max_epochs']}"


def _layout(run: Run) -> str:
    launch = run.provenance["launch"]
    return f"{launch['world_size']} ({launch['nodes']}x{launch['processes_per_node']})"


def _counted(run: Run, key: str) -> int | None:
    return (run.provenance["data"].get("counted") or {}).get(key)


def one_based(epoch: int | None) -> int | None:
    """An epoch as people count it (1 is the first), as the terminal does; metrics.csv and the
    checkpoints' names keep Lightning's count from 0."""
    return None if epoch is None else epoch + 1


def _global_batch(run: Run) -> int:
    """Samples per optimizer step, all ranks: DDP gives every rank trainer.batch_size."""
    return run.provenance["config"]["trainer"]["batch_size"] * run.provenance["launch"]["world_size"]


def _monitor(run: Run) -> str:
    return f"{run.monitor['metric']} ({run.monitor['mode']})"


COLUMNS = (
    Column("run_id", "run", lambda run: run.label),
    Column("status", "status", lambda run: run.provenance["status"]),
    Column("monitor", "monitor", _monitor),
    Column("best_score", "best score", lambda run: run.best_score),
    Column("best_epoch", "best epoch", lambda run: one_based(run.provenance["training"]["best_epoch"])),
    Column("epochs", "epochs", _training("epochs_completed"), _epochs_of_max),
    Column(
        "stopped_early",
        "early stop",
        _training("stopped_early"),
        lambda run: "yes" if _training("stopped_early")(run) else "no",
    ),
    # Two scopes, said in the labels (docs/report.md "Times"): trainer.fit is the last try's (the one that wrote the
    # record); the training loops are metrics.csv's, every epoch the final model went through, a resumed run's
    # earlier tries and a continued attempt's epochs included.
    Column("duration_s", "trainer.fit s, last try", lambda run: run.provenance["timing"]["duration_s"]),
    Column("train_loop_s", "training loops s, every epoch", lambda run: run.provenance["timing"]["train_seconds"]),
    Column("samples_per_s", "samples/s", _throughput),
    Column("world_size", "world size", _launch("world_size"), _layout),
    Column("global_batch", "global batch", _global_batch),
    Column("nodes", "nodes", _launch("nodes")),
    Column("processes_per_node", "processes per node", _launch("processes_per_node")),
    Column("launcher", "launcher", _launch("launcher")),
    Column("job_id", "job id", _launch("job_id"), lambda run: _launch("job_id")(run) or ""),
    Column("hosts", "hosts", lambda run: " ".join(run.provenance["launch"]["hosts"])),
    # Goodput (provenance timing.goodput): the tries of the run's attempt and the wall time each kind of
    # ending lost (the work after a try's last checkpoint, trained again), against the whole.
    Column("tries", "tries", lambda run: _goodput(run).get("tries")),
    Column("wall_s", "wall s", lambda run: _goodput(run).get("seconds")),
    Column("goodput", "goodput", lambda run: _goodput(run).get("ratio"), _goodput_shown),
    # The wall time after a try's last save; the account's disruption_lost_s is the step time in it (below).
    *(Column(f"lost_{kind}_s", f"wall time lost to {kind} s", _lost(kind, "seconds")) for kind in LOSSES),
    Column("lost_steps", "steps trained again", _lost_steps),
    # Every second of the tries by Goodput's buckets (run.account), their queue wait, GPU-hours and GPU load;
    # tries_account holds each try's own.
    *(Column(f"account_{name}", BUCKET_LABELS.get(name, _said(name)), _bucket(name)) for name in account.BUCKETS),
    Column("queue_wait_s", "queue wait s", _queue_wait),
    Column("gpu_hours", "GPU-hours", lambda run: _account(run).get("gpu_hours")),
    Column("gpu_util_mean", "GPU utilisation %", lambda run: _account(run).get("gpu_util_mean")),
    Column("tries_account", "tries' accounts", _tries_accounts),
    Column("code_commit", "commit", lambda run: run.provenance["code"]["commit"]),
    Column("dataset", "dataset", lambda run: run.provenance["data"]["dataset"]),
    # What the DataModule yielded, counted in training (provenance data.counted; none in older records).
    Column("samples_per_epoch", "samples per epoch", lambda run: _counted(run, "train_samples_per_epoch")),
    Column("batches_per_epoch", "batches per epoch", lambda run: _counted(run, "train_batches_per_epoch")),
    Column("val_samples", "validation samples", lambda run: _counted(run, "val_samples")),
)
BY_NAME = {column.name: column for column in COLUMNS}
# timing.phases is measured by the process that wrote the record: the last try's.
PHASE_COLUMNS = tuple(Column(f"phase_{key}", f"{label} s, last try", _phase(key)) for key, label in PHASES.items())
# What people read per run after the parameters that vary and the metrics (people_columns), and
# what `compare` shows as the outcome.
PEOPLE = (
    "epochs", "stopped_early", "duration_s", "samples_per_s", "goodput", "world_size", "global_batch", "launcher",
    "job_id",
)  # fmt: skip
OUTCOME = ("status", "monitor", "best_score", "best_epoch", "epochs", "duration_s", "train_loop_s", "samples_per_s",
           "tries", "goodput")  # fmt: skip
# compare sets two scores side by side: six digits tell close ones apart where the runs table's four read equal.
SCORE_DIGITS = 6


def metrics_of(runs: Sequence[Run]) -> list[str]:
    """Every metric any of the runs' models logged, in metric_order."""
    return sorted({name for run in runs for name in run.logged}, key=metric_order)


def at_best_columns(runs: Sequence[Run], names: Sequence[str]) -> list[Column]:
    """A column per metric: its value at each run's best epoch (``at_best:<metric>`` in runs.csv)."""
    return [Column(f"at_best:{name}", name, lambda run, name=name: run.at_best.get(name)) for name in names]


# Which way a metric improves, read from its name where the run does not monitor it (config.monitor: FALLING,
# RISING). A metric named otherwise has no best:<metric> column.


def direction(name: str, monitor: Mapping[str, str]) -> str | None:
    """``min`` or ``max``: the run's own mode for its monitored metric, else what the name says (or None)."""
    if name == monitor["metric"]:
        return monitor["mode"]
    if name.endswith(FALLING):
        return "min"
    return "max" if name.endswith(RISING) else None


def best_of(run: Run, name: str) -> float | None:
    """The metric's best value over the run's epochs (NaN epochs rank nowhere), where its direction is known."""
    way = direction(name, run.monitor)
    values = [float(row[name]) for row in run.metrics if isinstance(row.get(name), int | float)]
    values = [value for value in values if math.isfinite(value)]
    if way is None or not values:
        return None
    return min(values) if way == "min" else max(values)


def final_of(run: Run, name: str) -> float | None:
    """The metric at the last epoch that logged it."""
    return next((row[name] for row in reversed(run.metrics) if row.get(name) is not None), None)


def best_columns(runs: Sequence[Run], names: Sequence[str]) -> list[Column]:
    """A column per metric whose direction is known: its best over the epochs (``best:<metric>``), which
    may come from another epoch than the best checkpoint's (``at_best:<metric>``)."""
    known = [name for name in names if any(direction(name, run.monitor) for run in runs)]
    return [Column(f"best:{name}", f"best {name}", lambda run, name=name: best_of(run, name)) for name in known]


def final_columns(names: Sequence[str]) -> list[Column]:
    """A column per metric: its value at the run's last epoch (``final:<metric>``)."""
    return [Column(f"final:{name}", f"final {name}", lambda run, name=name: final_of(run, name)) for name in names]


def outcome_columns(runs: Sequence[Run]) -> list[Column]:
    """Every number a run's metrics give: the monitored score, then per metric its value at the best
    epoch, its best over the epochs and its final value; what configurations.csv aggregates."""
    names = metrics_of(runs)
    return [BY_NAME["best_score"], *at_best_columns(runs, names), *best_columns(runs, names), *final_columns(names)]


def metric_columns(runs: Sequence[Run]) -> list[Column]:
    """What people read about the runs' models: the monitored metric at its best (and which it is,
    when the runs rank by different ones), then the other validation-side metrics at that epoch."""
    monitors = {run.monitor["metric"] for run in runs}
    label = f"best {next(iter(monitors))}" if len(monitors) == 1 else "best score"
    columns = [Column("best_score", label, BY_NAME["best_score"].read)]
    if len(monitors) > 1:
        columns.append(BY_NAME["monitor"])
    others = [name for name in metrics_of(runs) if name not in monitors and not name.startswith("train")]
    return columns + at_best_columns(runs, others)


def varying_params(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Config keys whose values differ between runs: the sweep keys first, then any other.

    A single run shows its sweep keys, so the table always says what defines each row.
    """
    configs = [flatten(record["config"]) for record in records]
    keys = list(dict.fromkeys(key for record in records for key in record.get("sweep_point", {})))
    if len(records) > 1:
        keys = [k for k in keys if len({canonical_json(c.get(k)) for c in configs}) > 1]
        every = sorted(set().union(*configs))
        keys += [k for k in every if k not in keys and len({canonical_json(c.get(k)) for c in configs}) > 1]
    return keys


def param_columns(runs: Sequence[Run]) -> list[Column]:
    """A column per config key that varies across ``runs``: ``param:<key>`` in runs.csv, the key for people."""
    keys = varying_params([run.provenance for run in runs])
    return [
        Column(f"param:{key}", key, lambda run, key=key: flatten(run.provenance["config"]).get(key)) for key in keys
    ]


@dataclass(frozen=True)
class Rows:
    """A table as a header and its rows, in column order."""

    header: list[str]
    rows: list[list[Any]]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.header, row, strict=True)) for row in self.rows]


def runs_rows(runs: Sequence[Run]) -> Rows:
    """runs.csv: the parameters that vary across the runs (``param:<key>``), every column, then each
    metric any run logged at its best epoch (``at_best:<metric>``), at its best (``best:<metric>``)
    and at the last epoch (``final:<metric>``)."""
    names = metrics_of(runs)
    columns = [*param_columns(runs), *COLUMNS, *at_best_columns(runs, names), *best_columns(runs, names),
               *final_columns(names)]  # fmt: skip
    return Rows([c.name for c in columns], [[c.read(run) for c in columns] for run in runs])


def people_columns(runs: Sequence[Run]) -> list[Column]:
    """The runs table people read: run, the parameters that vary, outcome, speed, where it ran; the
    global batch beside the world size where that differs (same batch_size, other steps)."""
    shown = [name for name in PEOPLE if name != "global_batch" or global_batches_differ(runs)]
    return [BY_NAME["run_id"], *param_columns(runs), *metric_columns(runs), *(BY_NAME[name] for name in shown)]


def global_batches_differ(runs: Sequence[Run]) -> bool:
    """Whether the runs take optimizer steps over different numbers of samples (batch_size x world size)."""
    return len({_global_batch(run) for run in runs}) > 1


def summary_rows(runs: Sequence[Run], raw: bool = False) -> Rows:
    """The people's runs table, headed by the columns' labels: each value as people read it, or (``raw``, for
    ``--json``) as a script would (goodput 0.99, not "99%"; epochs 60, not "60/60")."""
    columns = people_columns(runs)
    return Rows([c.label for c in columns], [[c.read(run) if raw else c.shown(run) for c in columns] for run in runs])


def aligned(table: Rows, show: Callable[[Any], str]) -> str:
    """The table as right-aligned text columns for a terminal, each cell written by ``show``."""
    cells = [table.header, *([show(value) for value in row] for row in table.rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(table.header))]
    return "\n".join(" ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in cells)


def outcome(run: Run, metrics: Sequence[str], raw: bool = True) -> list[tuple[str, Any]]:
    """(label, value) of the columns ``compare`` puts side by side: the OUTCOME columns, with each of
    ``metrics`` (those either run logged) at the run's best epoch after the best score. Values as a script reads
    them, or (not ``raw``) as the runs table shows them (``readable`` of each column's ``shown``: samples/s to four
    digits, goodput "99%", epochs "8/8"), the scores to SCORE_DIGITS."""
    at_best = [replace(c, label=f"{c.label} at best epoch") for c in at_best_columns([run], metrics)]
    columns = [BY_NAME[name] for name in OUTCOME]
    split = OUTCOME.index("best_epoch") + 1
    scores = {"best_score", *(c.name for c in at_best)}

    def value(column: Column) -> Any:
        if raw:
            return column.read(run)
        if column.name in scores:
            return readable(column.read(run), SCORE_DIGITS)
        return readable(column.shown(run))

    return [(c.label, value(c)) for c in columns[:split] + at_best + columns[split:]]


def _csv_cell(value: Any) -> Any:
    """A value as runs.csv holds it: empty for none (as pandas wrote it), lists and dicts as JSON."""
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return canonical_json(value)
    return value


def write_csv(table: Rows, out: str | Path) -> Rows:
    """The table as a CSV file, cells as ``_csv_cell`` writes them."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(table.header)
    writer.writerows([_csv_cell(value) for value in row] for row in table.rows)
    atomic_write_text(out, text.getvalue())
    return table


def write_runs_table(runs: Sequence[Run], out: str | Path) -> Rows:
    return write_csv(runs_rows(runs), out)
