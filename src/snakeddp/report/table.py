"""The table of runs: one row per run, read from each run's provenance.json."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from snakeddp.fsutil import atomic_write_text, read_json

COLUMNS = (
    "run_id",
    "status",
    "best_val_loss",
    "best_val_acc",
    "best_epoch",
    "epochs",
    "stopped_early",
    "duration_s",
    "samples_per_s",
    "world_size",
    "nodes",
    "processes_per_node",
    "launcher",
    "job_id",
    "hosts",
    "code_commit",
    "dataset",
)


def run_row(record: dict[str, Any]) -> dict[str, Any]:
    """Flatten one provenance record; sweep parameters become columns named by their dotted key."""
    training, launch, timing = record["training"], record["launch"], record["timing"]
    row = {
        "run_id": record["run_id"],
        "status": record["status"],
        "best_val_loss": training["best_val_loss"],
        "best_val_acc": training["best_val_acc"],
        "best_epoch": training["best_epoch"],
        "epochs": training["epochs_completed"],
        "stopped_early": training["stopped_early"],
        "duration_s": timing["duration_s"],
        "samples_per_s": timing["samples_per_s"],
        "world_size": launch["world_size"],
        "nodes": launch["nodes"],
        "processes_per_node": launch["processes_per_node"],
        "launcher": launch["launcher"],
        "job_id": launch["job_id"],
        "hosts": " ".join(launch["hosts"]),
        "code_commit": record["code"]["commit"],
        "dataset": record["data"]["dataset"],
    }
    return {**row, **{f"param:{k}": v for k, v in record.get("sweep_point", {}).items()}}


def runs_frame(provenance_files: Iterable[str | Path]) -> pd.DataFrame:
    rows = [run_row(read_json(path)) for path in provenance_files]
    frame = pd.DataFrame(rows)
    params = sorted(c for c in frame.columns if c.startswith("param:"))
    return frame[[*params, *COLUMNS]] if len(frame) else pd.DataFrame(columns=COLUMNS)


def write_runs_table(provenance_files: Iterable[str | Path], out: str | Path) -> pd.DataFrame:
    frame = runs_frame(provenance_files)
    atomic_write_text(out, frame.to_csv(index=False))
    return frame
