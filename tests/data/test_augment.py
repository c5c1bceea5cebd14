"""Image batches from uint8 partitions: scaled and standardised with the data stage's statistics, and a
seeded crop and flip that depend on (seed, epoch, sample id) only, so any rank, batch or resume sees the same."""

from __future__ import annotations

import torch

from snakeddp.data.augment import ImageBatches

TASK = {"input_shape": [1, 4, 4], "image": {"mean": [0.5], "std": [0.25]}}


def pixels(n: int) -> torch.Tensor:
    return torch.arange(n * 16, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(n, 1, 4, 4)


def test_validation_batches_are_standardised_and_never_augmented():
    batches = ImageBatches(TASK, {"flip": True, "crop_padding": 2}, seed=7)
    out = batches(pixels(3), torch.arange(3), epoch=0, train=False)
    assert torch.allclose(out, (pixels(3).float() / 255 - 0.5) / 0.25)
    plain = ImageBatches(TASK, {"normalize": False}, seed=7)(pixels(3), torch.arange(3), 0, False)
    assert torch.allclose(plain, pixels(3).float() / 255)


def test_a_sample_is_augmented_by_its_id_and_epoch_whatever_its_batch():
    batches = ImageBatches(TASK, {"flip": True, "crop_padding": 1}, seed=7)
    images, ids = pixels(64), torch.arange(100, 164)
    whole = batches(images, ids, epoch=3, train=True)
    halves = torch.cat([batches(images[:32], ids[:32], 3, True), batches(images[32:], ids[32:], 3, True)])
    reordered = batches(images.flip(0), ids.flip(0), 3, True).flip(0)
    assert torch.equal(whole, halves) and torch.equal(whole, reordered)
    assert not torch.equal(whole, batches(images, ids, epoch=4, train=True)), "another epoch, other choices"
    assert not torch.equal(whole, batches(images, ids, 3, False)), "training batches are augmented"
    mirrored = ImageBatches(TASK, {"flip": True}, seed=7)(images, ids, 3, True)
    plain = batches(images, ids, 3, False)
    flipped = [torch.equal(m, p.flip(-1)) and not torch.equal(m, p) for m, p in zip(mirrored, plain, strict=True)]
    assert 16 < sum(flipped) < 48, "about half the samples are mirrored"
