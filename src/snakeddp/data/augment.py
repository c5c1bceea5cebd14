"""Image batches as the model takes them: uint8 [N, C, H, W] from a partition to float, scaled to [0, 1] and
standardised per channel (the mean and standard deviation the data stage measured over the train
partitions, in the manifest's task), with ``data.augment``'s random crop and flip on training batches.

Every random choice is a function of (training seed, epoch, sample id) through a splitmix64 hash, never of a
generator's state: a sample is cropped and flipped the same way whichever rank trains it, in whatever batch,
after a resume mid-epoch too, so two runs of one config stay bit-identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# Independent streams of the hash for the independent choices of one sample.
FLIP, CROP_ROW, CROP_COLUMN = 1, 2, 3


def _uniform(ids: np.ndarray, seed: int, epoch: int, stream: int) -> np.ndarray:
    """A [0, 1) value per sample id (splitmix64), the same on every machine."""
    with np.errstate(over="ignore"):
        key = np.uint64((seed * 1_000_003 + epoch) * 16 + stream)
        z = ids.astype(np.uint64) * _GOLDEN + key * np.uint64(0xBF58476D1CE4E5B9) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


class ImageBatches:
    """What turns a partition's uint8 images into a batch of floats (``data.augment``)."""

    def __init__(self, task: Mapping[str, Any], augment: Mapping[str, Any], seed: int) -> None:
        self.seed = seed
        self.flip = bool(augment.get("flip", False))
        self.padding = int(augment.get("crop_padding", 0))
        stats = task.get("image") or {}
        channels = int(task["input_shape"][0])
        normalize = bool(augment.get("normalize", True)) and bool(stats)
        mean = stats.get("mean", [0.0] * channels) if normalize else [0.0] * channels
        std = stats.get("std", [1.0] * channels) if normalize else [1.0] * channels
        # (x / 255 - mean) / std as one multiply and one add per pixel.
        scale = torch.tensor([1.0 / (255.0 * s) for s in std], dtype=torch.float32).view(1, -1, 1, 1)
        shift = torch.tensor([-m / s for m, s in zip(mean, std, strict=True)], dtype=torch.float32).view(1, -1, 1, 1)
        self.scale, self.shift = scale, shift

    def __call__(self, pixels: torch.Tensor, ids: torch.Tensor, epoch: int, train: bool) -> torch.Tensor:
        if train and (self.flip or self.padding):
            pixels = self._augment(pixels, ids.numpy(), epoch)
        return pixels.to(torch.float32) * self.scale + self.shift

    def _augment(self, pixels: torch.Tensor, ids: np.ndarray, epoch: int) -> torch.Tensor:
        out = pixels.clone()
        if self.padding:
            pad = self.padding
            height, width = pixels.shape[-2:]
            padded = torch.nn.functional.pad(pixels, (pad, pad, pad, pad))
            rows = np.floor(_uniform(ids, self.seed, epoch, CROP_ROW) * (2 * pad + 1)).astype(np.int64)
            columns = np.floor(_uniform(ids, self.seed, epoch, CROP_COLUMN) * (2 * pad + 1)).astype(np.int64)
            for i, (top, left) in enumerate(zip(rows.tolist(), columns.tolist(), strict=True)):
                out[i] = padded[i, :, top : top + height, left : left + width]
        if self.flip:
            mirrored = torch.from_numpy(_uniform(ids, self.seed, epoch, FLIP) < 0.5)
            out[mirrored] = out[mirrored].flip(-1)
        return out
