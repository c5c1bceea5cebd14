"""Build the report's files from the runs' provenance: report.html and the RO-Crate."""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from snakeddp.report import crate, html
from snakeddp.report.table import varying_params
from snakeddp.run.layout import PROVENANCE, RUNS
from snakeddp.run.runs import Run, earlier_attempts
from snakeddp.util.fsutil import atomic_write_text

# Beside runs.csv in results/report/ (the report rule's output of that name).
CONFIGURATIONS = "configurations.csv"


def write_report(
    runs: Sequence[Run],
    settings: Mapping[str, Any],
    curves: str | Path,
    scaling: str | Path | None,
    out: str | Path,
    exports: Sequence[str | Path] = (),
    tuning: str | Path | None = None,
    search: Mapping[str, Any] | None = None,
    account: str | Path | None = None,
) -> Path:
    """Write the self-contained report page for ``runs``; ``exports``: each run's exported model.json
    (results/export/<run>/model.json), linked from the page; ``tuning``: the metric-vs-hyperparameter figure;
    ``account``: where each run's wall time went (figures.account)."""
    runs = sorted(runs, key=lambda run: run.run_id)
    links = {
        "runs.csv (the runs table)": "runs.csv",
        "configurations.csv (runs that differ only in seed, aggregated)": CONFIGURATIONS,
        "ro-crate-metadata.json (Workflow Run RO-Crate)": crate.BASENAME,
    }
    links.update({f"{run.run_id}: {PROVENANCE}": f"{crate.PAYLOAD}/{RUNS}/{run.run_id}/{PROVENANCE}" for run in runs})
    history = [(earlier, crate.attempt_record(earlier)) for run in runs for earlier in earlier_attempts(run.run_dir)]
    links.update(export_links(exports, Path(out).resolve().parent))
    if search:
        links["search.csv (every configuration of the search)"] = "search.csv"
    return atomic_write_text(out, html.render(runs, settings, curves, scaling, links, history, tuning, search, account))


def export_links(exports: Sequence[str | Path], here: Path) -> dict[str, str]:
    """Each run's exported model.json (results/export/<run>/model.json), relative to the page in ``here``."""
    label = "exported model (snakeddp.load)"
    return {f"{Path(path).parent.name}: {label}": os.path.relpath(Path(path).resolve(), here) for path in exports}


def write_crate(
    runs: Sequence[Run],
    settings: Mapping[str, Any],
    repo: str | Path,
    config_files: Sequence[str | Path],
    resolved_config: Mapping[str, Any],
    report_files: Sequence[str | Path],
    out: str | Path,
) -> Path:
    """Write ro-crate-metadata.json next to the report, with the crate's files under files/."""
    runs = sorted(runs, key=lambda run: run.run_id)
    return crate.build(
        root=Path(out).parent,
        runs=runs,
        params=varying_params([run.provenance for run in runs]),
        settings=settings,
        repo=repo,
        config_files=config_files,
        resolved_config=resolved_config,
        report_files=report_files,
        snakemake_version=importlib.metadata.version("snakemake"),
    )
