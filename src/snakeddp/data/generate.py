"""Write datasets: partitions with their checksum entries, then the manifest."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.config import sources
from snakeddp.data import synthetic
from snakeddp.data.partitions import hand_over, write_manifest, write_partition, write_sidecar
from snakeddp.util.fsutil import read_json


def write_synthetic(
    params: Mapping[str, Any], split: str, index: int, path: str | Path, entry_path: str | Path
) -> dict[str, Any]:
    """Generate one partition (or the validation set) and write it with its entry."""
    tensors = synthetic.generate(params, split, index)
    metadata = {"generator": "snakeddp.synthetic/1", "split": split, "index": str(index)}
    entry = write_partition(path, tensors, metadata)
    hand_over(path, entry)  # hashed as it was written: training on this machine need not hash it again
    write_sidecar(entry_path, entry)
    return entry


def write_dataset_manifest(
    path: str | Path, dataset: str, params: Mapping[str, Any], train_entries: list[str | Path], val_entry: str | Path
) -> dict[str, Any]:
    """The manifest of the given partitions; the entries were recorded by the code that wrote them."""
    train = [read_json(p) for p in train_entries]
    val = read_json(val_entry)
    full_params = {**params, "num_train_files": len(train)}
    # A table's ingestion recorded its task (the features as it laid them out) in the validation set's entry.
    task = val.pop("task", None) or sources.task(full_params)
    return write_manifest(path, dataset, full_params, train, val, task)
