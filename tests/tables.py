"""A small local table (features a, b, c, a text column that is not a feature, label y) and the
dataset parameters that ingest it: shared by the ingestion tests and the progress lines' tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

FEATURES = ["a", "b", "c"]


def frame(rows: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    data = pd.DataFrame({name: rng.standard_normal(rows) for name in FEATURES})
    data["note"] = [f"row{i}" for i in range(rows)]  # a column that is not a feature
    data["y"] = (data["a"] > 0).astype(int)
    return data


def params(path: Path, partitions: int = 3, classes: int = 1, **table_overrides) -> dict:
    spec = {
        "path": str(path),
        "format": "auto",
        "features": FEATURES,
        "label": "y",
        "val_fraction": 0.2,
        "nan_policy": "error",
        "sha256": None,
    }
    return {
        "name": "t",
        "source": "table",
        "seed": 5,
        "num_train_files": partitions,
        "num_classes": classes,
        "table": {**spec, **table_overrides},
    }
