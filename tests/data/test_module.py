"""Sharding and partition-per-epoch loading."""

import itertools

import pytest
import torch

from snakeddp.data.module import Prefetcher, ShardedBatchSampler
from snakeddp.data.partitions import DataIntegrityError


def shards(n, batch, world, epoch=0, seed=1, shuffle=True):
    samplers = [ShardedBatchSampler(n, batch, rank, world, seed, epoch, shuffle) for rank in range(world)]
    return samplers, [[b.tolist() for b in s] for s in samplers]


@pytest.mark.parametrize(
    ("n", "batch", "world"), list(itertools.product([1, 2, 7, 64, 65, 101, 1000], [1, 3, 16], [1, 2, 3, 4]))
)
def test_every_sample_once_equal_batch_counts(n, batch, world):
    if n < world:
        with pytest.raises(ValueError, match="cannot be split"):
            ShardedBatchSampler(n, batch, 0, world, 0, 0, True)
        return
    samplers, batches = shards(n, batch, world)
    seen = [i for rank in batches for b in rank for i in b]
    assert sorted(seen) == list(range(n)), "every sample exactly once per epoch"
    counts = {len(rank) for rank in batches}
    assert len(counts) == 1, f"ranks must run the same number of steps, got {counts}"
    assert all(len(s) == len(batches[0]) for s in samplers), "__len__ matches iteration"
    assert all(len(b) > 0 for rank in batches for b in rank), "no empty batch"


def test_shuffle_depends_on_epoch_and_seed_but_agrees_across_ranks():
    _, e0 = shards(100, 10, 2, epoch=0)
    _, e0_again = shards(100, 10, 2, epoch=0)
    _, e1 = shards(100, 10, 2, epoch=1)
    _, other_seed = shards(100, 10, 2, epoch=0, seed=2)
    assert e0 == e0_again
    assert e0 != e1 and e0 != other_seed


def test_unshuffled_validation_is_in_order():
    _, batches = shards(10, 5, 1, shuffle=False)
    assert batches == [[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]]


def test_skip_resumes_mid_epoch_with_the_remaining_batches():
    full = [b.tolist() for b in ShardedBatchSampler(50, 4, 0, 2, 3, 5, True)]
    sampler = ShardedBatchSampler(50, 4, 0, 2, 3, 5, True)
    sampler.skip = 3
    assert [b.tolist() for b in sampler] == full[3:]
    assert [b.tolist() for b in sampler] == full, "skip applies to one iteration only"


def test_prefetcher_verifies_in_the_background_and_keeps_two(tmp_path):
    from snakeddp.data.generate import write_synthetic

    params = {
        "seed": 0,
        "num_records_per_train_file": 8,
        "num_val_records": 8,
        "num_features": 2,
        "num_classes": 1,
        "labels": "teacher",
        "label_noise": 0.0,
    }
    entries = [
        write_synthetic(params, "train", i, tmp_path / f"p{i}.safetensors", tmp_path / f"p{i}.json") for i in range(3)
    ]
    for i, entry in enumerate(entries):
        entry["file"] = f"p{i}.safetensors"
    prefetcher = Prefetcher(tmp_path, entries)
    part, waited = prefetcher.get(0)
    prefetcher.request(1)
    assert part.ids.tolist() == list(range(8)) and waited >= 0
    part, _ = prefetcher.get(1)
    prefetcher.request(2)
    assert sorted(prefetcher._loaded) == [1, 2], "only the current and the next partition are held"
    (tmp_path / "p0.safetensors").write_bytes(b"garbage")
    with pytest.raises(DataIntegrityError, match="p0.safetensors"):
        prefetcher.get(0)
    prefetcher.close()
    assert torch.equal(part.ids, torch.arange(8, 16))
