"""Seeded synthetic datasets in the shape of the reference tutorial, with learnable labels.

Every partition is a pure function of (data.seed, the dataset parameters, its index): its own
random stream is derived with numpy's SeedSequence, so partitions can be generated in any
order, in parallel, on any machine, and come out byte-identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

STREAM_TEACHER, STREAM_TRAIN, STREAM_VAL = 0, 1, 2


def _rng(seed: int, stream: int, index: int = 0) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(stream, index))))


def task(params: Mapping[str, Any]) -> dict[str, Any]:
    """What a model needs to know about the labels."""
    classes = params["num_classes"]
    return {
        "num_features": params["num_features"],
        "num_classes": classes,
        "kind": "binary" if classes == 1 else "multiclass",
    }


def _teacher(params: Mapping[str, Any]) -> np.ndarray:
    """A fixed random linear map shared by every partition and the validation set."""
    outputs = max(params["num_classes"], 1)
    return _rng(params["seed"], STREAM_TEACHER).standard_normal((params["num_features"], outputs))


# Features are converted to float64 a block of rows at a time: the whole partition at once
# doubled a data job's peak memory (8 bytes for every 4 of features). Each row's logits are the
# same dot products whatever the block, so the labels (and the file's bytes) do not depend on it.
_LOGIT_BLOCK_BYTES = 4 << 20


def _logits(features: np.ndarray, teacher: np.ndarray) -> np.ndarray:
    """``features @ teacher`` in float64, so BLAS differences between machines cannot flip a label."""
    logits = np.empty((features.shape[0], teacher.shape[1]), dtype=np.float64)
    rows = max(1, _LOGIT_BLOCK_BYTES // (8 * features.shape[1]))
    for start in range(0, features.shape[0], rows):
        block = slice(start, start + rows)
        np.matmul(features[block].astype(np.float64), teacher, out=logits[block])
    return logits


def generate(params: Mapping[str, Any], split: str, index: int = 0) -> dict[str, np.ndarray]:
    """Features, labels and ids of train partition ``index`` or of the validation set."""
    if split == "train":
        n, stream, first_id = (
            params["num_records_per_train_file"],
            STREAM_TRAIN,
            index * params["num_records_per_train_file"],
        )
    elif split == "val":
        n, stream, first_id = params["num_val_records"], STREAM_VAL, 0
    else:
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    rng = _rng(params["seed"], stream, index)
    classes = params["num_classes"]
    draws = 2 if classes == 1 else classes
    features = rng.standard_normal((n, params["num_features"]), dtype=np.float32)
    if params["labels"] == "random":
        labels = rng.integers(0, draws, n)
    else:
        logits = _logits(features, _teacher(params))
        labels = (logits[:, 0] > 0).astype(np.int64) if classes == 1 else logits.argmax(axis=1)
        noisy = rng.random(n) < params["label_noise"]
        labels[noisy] = rng.integers(0, draws, int(noisy.sum()))
    labels = labels.astype(np.float32).reshape(n, 1) if classes == 1 else labels.astype(np.int64)
    ids = np.arange(first_id, first_id + n, dtype=np.int64)
    return {"features": features, "labels": labels, "ids": ids}
