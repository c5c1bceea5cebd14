"""The reference tutorial's data format, the baseline we are measured against (never used in src/).

The tutorial (shared/reference/000) writes each partition as ``pickle.dump`` of a dict of torch
tensors ``{"features": [n, d] float32, "labels": [n, 1] float32}`` and reads it back with
``pickle.load``. These files are written by the benchmark itself, moments before it reads them.

    python -m bench.baselines.tutorial DIR PARTITIONS RECORDS VAL_RECORDS FEATURES   # the tutorial's create_data.py
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

import torch


def write_pickle(path: Path, features: torch.Tensor, labels: torch.Tensor) -> None:
    """The tutorial's create_data.py, with an fsync so the file can be evicted from the cache."""
    with path.open("wb") as handle:
        pickle.dump({"features": features, "labels": labels}, handle)
        handle.flush()
        os.fsync(handle.fileno())


def read_pickle(path: Path) -> dict[str, torch.Tensor]:
    """The tutorial's ``PartitionPerEpochDataModule.load_data``."""
    with path.open("rb") as handle:
        return pickle.load(handle)  # noqa: S301 -- the baseline reads a file this benchmark just wrote


def main(directory: str, partitions: int, records: int, val_records: int, features: int) -> None:
    """The tutorial's create_data.py: random partitions (torch.randn features, 0/1 labels), pickled,
    plus the file list ``bench.baselines.handwritten_ddp --format pickle`` reads them by."""
    root = Path(directory)
    (root / "train").mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)

    def write(stem: str, n: int) -> dict[str, str]:
        features_ = torch.randn(n, features, generator=generator)
        labels = torch.randint(0, 2, (n, 1), generator=generator).float()
        write_pickle(root / f"{stem}.pt", features_, labels)
        return {"file": f"{stem}.safetensors"}  # handwritten_ddp swaps the suffix for .pt

    index = {
        "task": {"num_features": features},
        "train": [write(f"train/part-{i:05d}", records) for i in range(partitions)],
        "val": write("val", val_records),
    }
    (root / "manifest.json").write_text(json.dumps(index))


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:6]))
