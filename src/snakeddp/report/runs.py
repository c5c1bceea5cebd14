"""Finished runs as the report and the command line see them: provenance plus per-epoch metrics.

A run is addressed by its id (``results/runs/<id>``) or by a path to its directory or its
provenance.json. Paths inside provenance (the data manifest) are relative to the directory the
workflow ran in, which for the standard layout is three levels above the run directory.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snakeddp.errors import RunNotFound
from snakeddp.fsutil import read_json
from snakeddp.provenance.record import FILE_NAME

METRICS_FILE = "metrics.csv"


def _number(text: str) -> int | float | str | None:
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """metrics.csv as one dict per epoch, numbers parsed, empty cells None."""
    path = Path(path)
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return [{key: _number(value) for key, value in row.items()} for row in csv.DictReader(handle)]


@dataclass(frozen=True)
class Run:
    """One finished run: its directory, its provenance record and its per-epoch metrics."""

    run_dir: Path
    provenance: dict[str, Any]
    metrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.provenance["run_id"]

    @property
    def workdir(self) -> Path:
        """The directory the workflow ran in (relative paths in provenance start there)."""
        if self.run_dir.parent.name == "runs" and len(self.run_dir.resolve().parents) >= 3:
            return self.run_dir.resolve().parents[2]
        return Path.cwd()

    def resolve(self, recorded: str) -> Path:
        """A path as recorded in provenance, made usable from here."""
        path = Path(recorded)
        if path.is_absolute():
            return path
        for base in (self.workdir, Path.cwd()):
            if (base / path).exists():
                return base / path
        return self.workdir / path

    @property
    def manifest_path(self) -> Path:
        return self.resolve(self.provenance["data"]["manifest"])

    def file(self, record: Mapping[str, Any]) -> Path:
        """The file of a checkpoint record (paths are relative to the run directory)."""
        path = Path(record["path"])
        return path if path.is_absolute() else self.run_dir / path


def load_run(run_dir: str | Path) -> Run:
    run_dir = Path(run_dir)
    return Run(run_dir=run_dir, provenance=read_json(run_dir / FILE_NAME), metrics=read_metrics(run_dir / METRICS_FILE))


def default_results(start: str | Path | None = None) -> Path:
    """The results directory for a command started anywhere in a checkout: the nearest ``results/`` at
    or above ``start`` (the working directory), else the one beside the nearest Snakefile."""
    here = Path(start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / "results").is_dir() or (directory / "Snakefile").is_file():
            return directory / "results"
    return Path("results")


def find_runs(results: str | Path) -> list[Run]:
    """Every finished run (one with provenance.json) under ``results/runs``, sorted by id."""
    return [load_run(path.parent) for path in sorted(Path(results).glob(f"runs/*/{FILE_NAME}"))]


def runs_from_provenance(paths: list[str | Path]) -> list[Run]:
    return [load_run(Path(path).parent) for path in paths]


def resolve_run(ref: str, results: str | Path = "results") -> Run:
    """The run named by ``ref``: a run id under ``results/runs``, a run directory or its provenance.json."""
    results = Path(results)
    candidates = [Path(ref), results / "runs" / ref]
    for candidate in candidates:
        run_dir = candidate.parent if candidate.name == FILE_NAME else candidate
        if (run_dir / FILE_NAME).is_file():
            return load_run(run_dir)
    known = sorted(p.parent.name for p in results.glob(f"runs/*/{FILE_NAME}"))
    unfinished = (results / "runs" / ref).is_dir()
    reason = "has no provenance.json (it has not finished)" if unfinished else "is not a run id or run directory"
    hint = (
        f"finished runs under {results}/runs: {', '.join(known)}" if known else f"no finished runs under {results}/runs"
    )
    raise RunNotFound(f"{ref!r} {reason}. HINT: {hint}; pass --results DIR for another results directory.")
