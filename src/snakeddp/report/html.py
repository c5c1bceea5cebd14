"""The report page: one self-contained HTML file that opens offline.

Styles are inline, figures are embedded as base64 data URIs, and a Content-Security-Policy
forbids every fetch, so the page shows the same thing on a laptop, a cluster login node or an
archive years later. No JavaScript: sections fold with <details>. The markup is in
``templates/`` (Jinja2, autoescaped, as Snakemake's own report); this module works out what the
page says and passes it as data.
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import yaml

from snakeddp import __version__
from snakeddp.config import applying
from snakeddp.environment import sbom
from snakeddp.report import configurations, crate, figures
from snakeddp.report.compare import compare
from snakeddp.report.figures import scaling_points, why_flat
from snakeddp.report.table import (
    BY_NAME,
    PHASE_COLUMNS,
    PHASES,
    THROUGHPUT_MEANS,
    at_best_columns,
    global_batches_differ,
    metric_columns,
    metrics_of,
    one_based,
    people_columns,
    varying_params,
)
from snakeddp.run.runs import Run
from snakeddp.util.fsutil import read_json
from snakeddp.util.numbers import disk_size, readable
from snakeddp.util.redact import redact_text
from snakeddp.util.words import counted


def short(sha: str | None, n: int = 12) -> str:
    return sha[:n] if sha else "–"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("snakeddp.report", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,  # a misspelt field fails the report instead of leaving a blank
    trim_blocks=True,
    lstrip_blocks=True,
)
TEMPLATES.filters.update(num=readable, short=short, duration=duration, size=disk_size, epoch=one_based, counted=counted)


def data_uri(path: str | Path) -> str:
    """The file's bytes as a base64 data URI, so the page carries its figures."""
    kind, _ = mimetypes.guess_type(path)
    return f"data:{kind};base64,{base64.b64encode(Path(path).read_bytes()).decode()}"


def _best(groups: Sequence[configurations.Configuration]) -> dict[str, Any] | None:
    """The best configuration by the mean of the monitored metric over its seeds, how many seeds back
    it, those it ties with, and the mean of the other metrics its runs logged at their best epochs."""
    ranked = configurations.ranked(groups)
    if not ranked:
        return None
    best = ranked[0]
    metric = best.monitor["metric"]
    names = [name for name in metrics_of(best.runs) if name != metric and not name.startswith("train")]
    others = [
        (name, best.of(column).mean) for name, column in zip(names, at_best_columns(best.runs, names), strict=True)
    ]
    return {"name": best.name, "run_id": best.runs[0].run_id, "runs": len(best.runs), "metric": metric,
            "mode": best.monitor["mode"], "score": best.score, "others": others,
            "tied": configurations.tied(best, ranked)}  # fmt: skip


def _summary(runs: Sequence[Run], groups: Sequence[configurations.Configuration]) -> dict[str, Any]:
    records = [run.provenance for run in runs]
    commits = [r["code"]["commit"] for r in records]
    phases = [r["timing"].get("phases") for r in records]
    monitors = sorted({f"{run.monitor['metric']} ({run.monitor['mode']})" for run in runs})
    return {
        "best": _best(groups),
        "seeded": any(len(group.runs) > 1 for group in groups),
        "monitors": monitors,
        "code": {
            "commits": len(set(commits)),
            "commit": commits[0],
            "dirty_runs": sum(bool(r["code"]["dirty"]) for r in records),
        },
        "environments": sorted(
            {r["environment"]["environment_hash"] or r["environment"]["packages_sha256"] for r in records}
        ),
        "datasets": sorted({r["data"]["dataset"] for r in records}),
        "time": {
            "fit_s": sum(r["timing"]["duration_s"] for r in records),
            "loop_s": sum(r["timing"]["train_seconds"] for r in records),
            # Totals of the phases only when every run recorded them (epoch_ends_s: only newer records): a partial
            # sum would mislead.
            "phases": {key: sum(p[key] for p in phases) for key in PHASES if all(key in p for p in phases)}
            if all(phases)
            else None,
        },
    }


def _runs_table(runs: Sequence[Run], groups: Sequence[configurations.Configuration]) -> dict[str, Any]:
    columns = people_columns(runs)
    ranked = configurations.ranked(groups)
    best = {run.run_id for run in ranked[0].runs} if ranked else set()
    rows = [{"run_id": run.run_id, "best": run.run_id in best, "cells": [c.shown(run) for c in columns[1:]]}
            for run in runs]  # fmt: skip
    batches = sorted({BY_NAME["global_batch"].read(run) for run in runs})
    return {"labels": [c.label for c in columns], "rows": rows,
            "global_batch": batches if global_batches_differ(runs) else None}  # fmt: skip


def _configurations_table(runs: Sequence[Run], groups: Sequence[configurations.Configuration]) -> dict[str, Any]:
    """One row per configuration: its parameters, its seeds, and mean ± spread of the metrics the runs
    table shows (the monitored one at its best, the other validation metrics at that epoch)."""
    ranked = configurations.ranked(groups)
    styles = figures.run_styles(groups)
    keys = list(groups[0].params) if groups else []
    metrics = metric_columns(runs)
    return {
        "labels": ["configuration", *keys, "seeds", *(f"{c.label} (mean ± sd)" for c in metrics)],
        "rows": [
            {
                "name": group.name,
                "color": styles[group.name]["color"],
                "best": bool(ranked) and group is ranked[0],
                "params": [group.params[key] for key in keys],
                "seeds": len(group.runs),
                "runs": [run.run_id for run in group.runs],
                "spreads": [group.of(column) for column in metrics],
            }
            for group in groups
        ],
    }


def _time_table(runs: Sequence[Run]) -> dict[str, Any]:
    """Seconds per run: what trainer.fit and the loops took, and the phases where a run recorded them."""
    columns = [BY_NAME["duration_s"], BY_NAME["train_loop_s"]]
    phases = any(run.provenance["timing"].get("phases") for run in runs)
    if phases:
        columns += PHASE_COLUMNS
    return {
        "phases": phases,
        "labels": ["run", *(c.label for c in columns)],
        "rows": [{"run_id": run.run_id, "cells": [c.read(run) for c in columns]} for run in runs],
    }


def _data_view(run: Run) -> dict[str, str]:
    """The data section's lines, saying which numbers do not apply to the run's data source."""
    data, config = run.provenance["data"], run.provenance["config"]["data"]
    source, module = config.get("source", "synthetic"), config.get("module")
    counted = data.get("counted")
    seen = "–"
    if counted:
        val = (
            "no validation"
            if counted["val_batches"] is None
            else (f"{counted['val_samples']:,} validation samples in {counted['val_batches']:,} batches")
        )
        seen = (f"{counted['train_samples_per_epoch']:,} train samples in {counted['train_batches_per_epoch']:,} "
                f"batches per epoch, {val} (all ranks, as the DataModule yielded them)")  # fmt: skip
    if source == "module":
        reader = f"the DataModule {module} reads its own data"
        return {"partitions": f"– (does not apply: {reader})", "records": f"– (does not apply: {reader})", "seen": seen}
    records = data["records"] or {}
    listed = f"{records.get('train', 0):,} train, {records.get('val', 0):,} validation (the manifest's)"
    if module:
        listed += f"; training read them through {module}"
    return {"partitions": f"{data['partitions']}", "records": listed, "seen": seen}


def _run_view(run: Run) -> dict[str, Any]:
    # provenance's launch record: how the run was placed (not the config's launch section).
    training, launched = run.provenance["training"], run.provenance["launch"]
    return {
        "id": run.run_id,
        "p": run.provenance,
        "data": _data_view(run),
        "monitor": run.monitor,
        "best_score": run.best_score,
        "logged": run.logged,
        "throughput": BY_NAME["samples_per_s"].read(run),
        "best_path": (training["best_checkpoint"] or {}).get("path"),
        "checkpoints": training["checkpoints"] or [c for c in (training["last_checkpoint"],) if c],
        # The keys that apply to the run (a DataModule's run has no generator; a model.target no model.lr): the
        # record keeps them all, at their defaults, and its sha256 is of them all.
        "config_yaml": yaml.safe_dump(applying(run.provenance["config"]), sort_keys=False, allow_unicode=True),
        "variables": "\n".join(f"{k}={v}" for k, v in launched["variables"].items()) or "(none recorded)",
    }


def _history(runs: Sequence[Run], history: Sequence[tuple[Run, str]]) -> list[dict[str, Any]]:
    """Earlier finished attempts: what differs from the run's current attempt, and their outcome."""
    current = {run.run_id: run for run in runs}
    rows = []
    for attempt, href in history:
        differences = compare(attempt, current[attempt.run_id])
        changed = [f"{key}: {readable(a)} → {readable(b)}" for key, a, b in differences["config"]]
        changed += [f"{section} differs" for section in ("code", "data", "environment") if differences[section]]
        training = attempt.provenance["training"]
        rows.append(
            {
                "label": attempt.label,
                "finished": attempt.provenance["timing"]["finished_at"],
                "changed": changed,
                "cells": [attempt.monitor["metric"], attempt.best_score, training["epochs_completed"]],
                "href": href,
            }
        )
    return rows


def render(
    runs: Sequence[Run],
    settings: Mapping[str, Any],
    curves_figure: str | Path,
    scaling_figure: str | Path | None,
    links: Mapping[str, str] | None = None,
    history: Sequence[tuple[Run, str]] = (),
    tuning_figure: str | Path | None = None,
    search: Mapping[str, Any] | None = None,
    account_figure: str | Path | None = None,
) -> str:
    """The whole page for ``runs``; ``links`` maps labels to files next to the report; ``history``
    pairs each earlier finished attempt with the link to its provenance; ``tuning_figure``: the
    monitored metric against each numeric swept key (report.tuning), where the sweep has one;
    ``search``: the search's view (snakeddp.report.search), when a search chose the runs; ``account_figure``:
    where each run's wall time went (figures.account)."""
    params = varying_params([run.provenance for run in runs])
    groups = configurations.group(runs)
    plotted, absent = figures.plotted_metrics(runs, settings["metrics"])
    scaling = None
    if scaling_figure:
        points = sorted(scaling_points(runs, params), key=lambda p: (p["series"], p["world_size"]))
        scaling = {"figure": data_uri(scaling_figure), "points": points, "why_flat": why_flat(points)}
    return TEMPLATES.get_template("report.html.j2").render(
        title=redact_text(settings["title"]),
        version=__version__,
        generated=datetime.now(UTC).isoformat(timespec="seconds"),
        runs=[_run_view(run) for run in runs],
        summary=_summary(runs, groups),
        table=_runs_table(runs, groups),
        configurations=_configurations_table(runs, groups),
        spread_means=configurations.SPREAD_MEANS,
        tuning={
            "figure": data_uri(tuning_figure),
            "swept": configurations.numeric_keys([run.provenance.get("sweep_point") or {} for run in runs]),
        }
        if tuning_figure
        else None,
        time_table=_time_table(runs),
        account=data_uri(account_figure) if account_figure else None,
        throughput_means=THROUGHPUT_MEANS,
        metrics=plotted,
        absent_metrics=absent,
        loss_panel=sum(name.endswith("_loss") for name in plotted) > 1,  # losses share one (figures.curves)
        curves=data_uri(curves_figure),
        scaling=scaling,
        links=list((links or {}).items()),
        history=_history(runs, history),
        search=search,
        per_class=[view for view in map(per_class, runs) if view],
        licences=training_licences(runs),
    )


def per_class(run: Run) -> dict[str, Any] | None:
    """A multiclass run's best epoch on the validation set, class by class: the confusion matrix its
    provenance recorded, each class's support, precision and recall; None for other runs."""
    confusion = (run.provenance.get("training") or {}).get("confusion")
    if not confusion:
        return None
    matrix = confusion["matrix"]
    names = run.provenance["data"].get("classes") or [str(i) for i in range(len(matrix))]
    rows = []
    for i, (name, counts) in enumerate(zip(names, matrix, strict=False)):
        support, predicted = sum(counts), sum(row[i] for row in matrix)
        rows.append(
            {
                "name": name,
                "counts": counts,
                "support": support,
                "precision": counts[i] / predicted if predicted else None,
                "recall": counts[i] / support if support else None,
            }
        )
    return {"run": run.run_id, "epoch": confusion["epoch"], "names": names, "rows": rows}


def training_licences(runs: Sequence[Run]) -> list[tuple[str, list[str]]]:
    """Licence -> the packages declaring it, in the bills of materials of the environments the runs trained in."""
    found: dict[str, set[str]] = {}
    for path in {p for p in map(crate.sbom_of, runs) if p is not None}:
        for licence, packages in sbom.licences(read_json(path)).items():
            found.setdefault(licence, set()).update(packages)
    return [(licence, sorted(packages)) for licence, packages in sorted(found.items())]
