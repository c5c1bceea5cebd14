"""The reference tutorial's data format, the baseline we are measured against (never used in src/).

The tutorial (shared/reference/000) writes each partition as ``pickle.dump`` of a dict of torch
tensors ``{"features": [n, d] float32, "labels": [n, 1] float32}`` and reads it back with
``pickle.load``. These files are written by the benchmark itself, moments before it reads them.
"""

from __future__ import annotations

import os
import pickle
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
