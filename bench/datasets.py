"""Datasets for the benchmarks, written by the project's own generator in the workflow's layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snakeddp import config as configuration
from snakeddp.config import sources
from snakeddp.data.generate import write_dataset_manifest, write_synthetic


def data_config(records: int, features: int, val_records: int, partitions: int) -> dict[str, Any]:
    """The ``data:`` section of a config with these sizes (every other key at its default)."""
    cfg = configuration.validate(
        {
            "data": {
                "num_train_files": partitions,
                "num_records_per_train_file": records,
                "num_val_records": val_records,
                "num_features": features,
            }
        }
    )
    return cfg["data"]


def ensure_dataset(root: Path, data: dict[str, Any]) -> Path:
    """Write the partitions of ``data`` that are missing under ``root`` and return the manifest path.

    Same files and manifest as the workflow's data stage (results/data/<dataset>/...), so a
    benchmark reads exactly what training reads.
    """
    dataset = configuration.dataset_id(data)
    directory = root / dataset
    parts = data["num_train_files"]
    manifest = directory / f"manifest-{parts}.json"
    if manifest.is_file():
        return manifest
    params = sources.identity(data)
    entries = []
    for index in range(parts):
        part = directory / "train" / f"part-{index:05d}.safetensors"
        entry = part.with_suffix(".json")
        if not entry.is_file():
            write_synthetic(params, "train", index, part, entry)
        entries.append(entry)
    if not (directory / "val.json").is_file():
        write_synthetic(params, "val", 0, directory / "val.safetensors", directory / "val.json")
    write_dataset_manifest(manifest, dataset, params, entries, directory / "val.json")
    return manifest
