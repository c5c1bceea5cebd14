"""Batches made where the model trains (snakeddp.data.device) hold the host path's samples, in its order.

The host path is the DataLoader a CPU run trains on (ResumableLoader over _PartitionBatches, one batch per step);
the device paths are the partition gathered on the device (``gathered``) and the batches streamed to it a batch
ahead (``streamed``). Without a GPU both run with device=cpu, which takes the same code but for the streams and
the copies; the tests marked gpu run them on CUDA (``pytest -m gpu``).
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from snakeddp.compat.lightning import batches_done
from snakeddp.data import device as on_device
from snakeddp.data.module import Prefetcher, ResumableLoader, ShardedBatchSampler, _PartitionBatches
from snakeddp.data.partitions import Partition

CPU = torch.device("cpu")


def partition(n: int = 103, features: int = 5, multiclass: bool = False) -> Partition:
    generator = torch.Generator().manual_seed(n)
    labels = (
        torch.randint(0, 4, (n,), generator=generator)
        if multiclass
        else torch.randint(0, 2, (n, 1), generator=generator).float()
    )
    return Partition(
        "p.safetensors", torch.randn(n, features, generator=generator), labels, torch.arange(1000, 1000 + n)
    )


def loader(part: Partition, rank: int, world: int, epoch: int, done: int, path: str, dev: torch.device = CPU):
    """One rank's training loader of ``part`` for ``epoch``, resumed after ``done`` batches, and its trace."""
    trace: list[torch.Tensor] = []
    dataset = _PartitionBatches(part, trace, epoch=epoch, train=True)
    sampler = ShardedBatchSampler(len(part), 8, rank, world, seed=3, epoch=epoch, shuffle=True)
    if path == "host":
        batches_of = None
    elif path == "gathered":
        placed = dataclasses.replace(part, features=part.features.to(dev), labels=part.labels.to(dev))
        batches_of = lambda batches: on_device.gathered(placed, batches, dev, trace)  # noqa: E731
    else:
        batches_of = lambda batches: on_device.streamed(dataset.__getitems__, batches, dev)  # noqa: E731
    made = ResumableLoader(dataset, sampler, lambda: done, batches_of=batches_of)
    made.load_state_dict({"epoch": epoch, "batches_done": done})
    return made, trace


def epoch_of(part: Partition, rank: int, world: int, epoch: int, done: int, path: str, dev: torch.device = CPU):
    made, trace = loader(part, rank, world, epoch, done, path, dev)
    batches = [(features.cpu(), labels.cpu()) for features, labels in made]
    return batches, [ids.tolist() for ids in trace], len(made)


def assert_same_batches(expected, got):
    assert len(got) == len(expected), f"{len(got)} batches, the host path made {len(expected)}"
    for i, ((features, labels), (want_features, want_labels)) in enumerate(zip(got, expected, strict=True)):
        assert torch.equal(features, want_features), f"batch {i}: features differ from the host path's"
        assert torch.equal(labels, want_labels), f"batch {i}: labels differ from the host path's"


@pytest.mark.parametrize("path", ["gathered", "streamed"])
@pytest.mark.parametrize(("world", "epoch", "done"), [(1, 0, 0), (1, 3, 0), (2, 1, 0), (2, 2, 3), (3, 5, 1)])
def test_the_device_paths_make_the_host_paths_batches_in_its_order(path, world, epoch, done):
    part = partition(multiclass=world == 3)
    every_rank = []
    for rank in range(world):
        host, host_ids, host_len = epoch_of(part, rank, world, epoch, done, "host")
        got, got_ids, got_len = epoch_of(part, rank, world, epoch, done, path)
        assert got_len == host_len
        if path == "gathered":  # the streamed path's ids come from the host path's own gather
            assert got_ids == host_ids, "the trace records the host path's sample ids, batch by batch"
        assert_same_batches(host, got)
        every_rank += [i for ids in host_ids for i in ids]
    if done == 0:
        assert sorted(every_rank) == list(range(1000, 1000 + len(part))), "each sample once across the ranks"
        assert every_rank != sorted(every_rank), "a shuffled epoch: an order that could be got wrong"


def test_a_wrong_order_or_value_is_caught():
    """What the comparison above would say of a path that gathered the right samples in another order, or
    changed one value: it fails."""
    part = partition()
    host, _, _ = epoch_of(part, 0, 2, 1, 0, "host")
    swapped = [host[1], host[0], *host[2:]]
    with pytest.raises(AssertionError, match="batch 0"):
        assert_same_batches(host, swapped)
    changed = [(features.clone(), labels) for features, labels in host]
    changed[-1][0][0, 0] += 1e-6
    with pytest.raises(AssertionError, match=f"batch {len(host) - 1}: features"):
        assert_same_batches(host, changed)


def test_a_resumed_epoch_makes_the_batches_the_interrupted_one_had_left():
    part = partition()
    whole, _, _ = epoch_of(part, 1, 2, 4, 0, "gathered")
    resumed, _, _ = epoch_of(part, 1, 2, 4, 3, "gathered")
    assert_same_batches(whole[3:], resumed)


def test_the_prefetcher_places_each_partition_once(tmp_path):
    """A partition requested before ``place`` was set (the first, as the DataModule is made) is placed by get,
    once; the later ones on the prefetch thread."""
    from snakeddp.data.generate import write_synthetic

    params = {"seed": 0, "num_records_per_train_file": 8, "num_val_records": 8, "num_features": 2,
              "num_classes": 1, "labels": "teacher", "label_noise": 0.0}  # fmt: skip
    entries = [
        write_synthetic(params, "train", i, tmp_path / f"p{i}.safetensors", tmp_path / f"p{i}.json") for i in range(2)
    ]
    for i, entry in enumerate(entries):
        entry["file"] = f"p{i}.safetensors"
    prefetcher = Prefetcher(tmp_path, entries)
    prefetcher.request(0)
    placed: list[str] = []

    def place(part: Partition) -> Partition:
        if part.features.dtype == torch.float64:  # placed already
            return part
        placed.append(part.name)
        return dataclasses.replace(part, features=part.features.double())

    prefetcher.place = place
    first, _ = prefetcher.get(0)
    again, _ = prefetcher.get(0)
    prefetcher.request(1)
    second, _ = prefetcher.get(1)
    prefetcher.close()
    assert first.features.dtype == second.features.dtype == torch.float64
    assert again is first and placed == ["p0.safetensors", "p1.safetensors"]


class Rows(pl.LightningModule):
    """A linear model trained on one partition through a given path: the same batches give the same weights."""

    def __init__(self, part: Partition, path: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(part.features.shape[1], 1)
        self.part, self.path = part, path

    def training_step(self, batch, batch_idx):
        features, labels = batch
        return torch.nn.functional.binary_cross_entropy_with_logits(self.layer(features), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)

    def train_dataloader(self):
        made, _ = loader(self.part, 0, 1, self.trainer.current_epoch, 0, self.path)
        made._batches_done = lambda: batches_done(self.trainer)
        return made


def fitted(tmp_path: Path, path: str) -> torch.Tensor:
    model = Rows(partition(), path)
    trainer = pl.Trainer(
        max_epochs=3, reload_dataloaders_every_n_epochs=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(model)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_lightning_trains_the_same_weights_on_either_path(tmp_path):
    host = fitted(tmp_path, "host")
    untrained = torch.cat([p.detach().flatten() for p in Rows(partition(), "host").parameters()])
    assert not torch.equal(host, untrained), "it trained"
    for path in ("gathered", "streamed"):
        assert torch.equal(fitted(tmp_path, path), host), f"{path}: other weights than the host path's"


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["gathered", "streamed"])
def test_on_a_gpu_the_device_paths_make_the_host_paths_batches(path):
    assert torch.cuda.is_available(), "pytest -m gpu needs a CUDA GPU"
    gpu = torch.device("cuda", 0)
    part = partition(n=4099, features=64)
    moved = on_device.resident(part, gpu)
    assert moved.features.device == gpu and moved.ids.device == CPU, "a small partition lives on the GPU"
    for world, epoch, done in itertools.product((1, 2), (0, 1), (0, 2)):
        for rank in range(world):
            host, _, _ = epoch_of(part, rank, world, epoch, done, "host")
            made, _ = loader(part, rank, world, epoch, done, path, gpu)
            got = list(made)
            assert all(features.device == gpu for features, _ in got)
            assert_same_batches(host, [(features.cpu(), labels.cpu()) for features, labels in got])
