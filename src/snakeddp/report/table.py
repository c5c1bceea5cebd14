"""The table of runs: one row per run, read from each run's provenance.json."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from snakeddp.fsutil import atomic_write_text, read_json
from snakeddp.hashing import canonical_json

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


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested config -> {dotted.key: leaf}; lists stay leaves."""
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: value}


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
    """One row per run: every parameter that varies across the runs (``param:<key>``), then COLUMNS."""
    records = [read_json(path) for path in provenance_files]
    if not records:
        return pd.DataFrame(columns=COLUMNS)
    params = varying_params(records)
    rows = []
    for record in records:
        config = flatten(record["config"])
        rows.append({**{f"param:{k}": config.get(k) for k in params}, **run_row(record)})
    return pd.DataFrame(rows)[[*(f"param:{k}" for k in params), *COLUMNS]]


def summary_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The runs table people read (terminal and HTML): varying parameters, outcome, speed, where it ran."""
    params = varying_params(records)
    rows = []
    for record in records:
        training, launch, timing = record["training"], record["launch"], record["timing"]
        config = flatten(record["config"])
        rows.append(
            {
                "run": record["run_id"],
                **{key: config.get(key) for key in params},
                "best val_loss": training["best_val_loss"],
                "val acc": training["best_val_acc"],
                "epochs": f"{training['epochs_completed']}/{training['max_epochs']}",
                "early stop": "yes" if training["stopped_early"] else "no",
                "duration s": timing["duration_s"],
                "samples/s": timing["samples_per_s"],
                "world size": f"{launch['world_size']} ({launch['nodes']}x{launch['processes_per_node']})",
                "launcher": launch["launcher"],
                "job id": launch["job_id"] or "",
            }
        )
    return pd.DataFrame(rows)


def write_runs_table(provenance_files: Iterable[str | Path], out: str | Path) -> pd.DataFrame:
    frame = runs_frame(provenance_files)
    atomic_write_text(out, frame.to_csv(index=False))
    return frame
