"""The LightningDataModule that trains on one partition per epoch.

Epoch e trains on partition e mod P (the reference tutorial's scheme), so the dataset may be
far larger than a node's memory: a process holds the validation set, the current partition and
the next one, which a background thread loads and checksums while the current one trains.

Each partition is sharded across ranks by ``ShardedBatchSampler``: every sample is seen by
exactly one rank per epoch and every rank gets the same number of batches (DDP needs that),
without the sample duplication of torch's DistributedSampler.

On a CUDA device the batches are gathered there, or streamed to it a batch ahead (``snakeddp.data.device``);
on the CPU the DataLoader gathers them, as the step takes them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from snakeddp.compat.lightning import batches_done
from snakeddp.data import device as on_device
from snakeddp.data import pagecache
from snakeddp.data.augment import ImageBatches
from snakeddp.data.partitions import Partition, load_manifest, read_partition
from snakeddp.data.stream import Stream, is_stream
from snakeddp.util.fsutil import read_json


class ShardedBatchSampler:
    """Batches of one rank's shard of a partition.

    The epoch's permutation (seeded by (seed, epoch), identical on every rank) is cut into global
    batches of ``batch_size * world_size`` samples, and each global batch is split evenly across
    ranks. A last global batch too small to give every rank a sample joins the one before it.
    """

    def __init__(
        self, num_samples: int, batch_size: int, rank: int, world_size: int, seed: int, epoch: int, shuffle: bool
    ) -> None:
        if num_samples < world_size:
            raise ValueError(f"{num_samples} samples cannot be split across {world_size} ranks")
        self.num_samples, self.batch_size = num_samples, batch_size
        self.rank, self.world_size = rank, world_size
        self.seed, self.epoch, self.shuffle = seed, epoch, shuffle
        #: Batches of this epoch already trained by an interrupted attempt (set on resume).
        self.skip = 0

    def _global_batches(self) -> list[torch.Tensor]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(self.num_samples, generator=generator)
        else:
            order = torch.arange(self.num_samples)
        batches = list(torch.split(order, self.batch_size * self.world_size))
        if len(batches) > 1 and len(batches[-1]) < self.world_size:
            batches[-2:] = [torch.cat(batches[-2:])]
        return batches

    def __iter__(self) -> Iterator[torch.Tensor]:
        skip, self.skip = self.skip, 0
        for batch in self._global_batches()[skip:]:
            yield torch.tensor_split(batch, self.world_size)[self.rank]

    def __len__(self) -> int:
        full, rest = divmod(self.num_samples, self.batch_size * self.world_size)
        return full + (1 if rest >= self.world_size or full == 0 else 0)


class _PartitionBatches(torch.utils.data.Dataset):
    """Gathers a whole batch with one indexing op instead of one __getitem__ per sample; image batches
    (uint8) leave as floats, augmented when training (snakeddp.data.augment)."""

    def __init__(
        self,
        partition: Partition,
        trace: list[torch.Tensor] | None,
        images: ImageBatches | None = None,
        epoch: int = 0,
        train: bool = False,
    ) -> None:
        self.partition, self.trace = partition, trace
        self.images, self.epoch, self.train = images, epoch, train

    def __len__(self) -> int:
        return len(self.partition)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        features, labels = self.__getitems__(torch.tensor([index]))
        return features[0], labels[0]

    def __getitems__(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        indices = torch.as_tensor(indices)
        if self.trace is not None:
            self.trace.append(self.partition.ids[indices])
        features = self.partition.features[indices]
        if self.images is not None:
            features = self.images(features, self.partition.ids[indices], self.epoch, self.train)
        return features, self.partition.labels[indices]


class _Deferred:
    """A partition read on first use (``load``), whose length is known before (a streamed dataset's validation)."""

    def __init__(self, load: Callable[[], Partition], records: int) -> None:
        self._load, self._records, self._partition = load, int(records), None

    def __len__(self) -> int:
        return self._records

    def __getattr__(self, name: str) -> Any:  # ids, features, labels, name: the partition's, once read
        if self._partition is None:
            self._partition = self._load()
        return getattr(self._partition, name)


def _as_batch(batch: Any) -> Any:
    return batch


class DeviceLoader(DataLoader):
    """A DataLoader whose batches, given ``batches_of``, are made from the sampler's whole epoch at once
    (``snakeddp.data.device``: gathered on the GPU or streamed to it) instead of one by one on the host;
    ``starting`` is called as each iteration starts."""

    def __init__(
        self,
        dataset: torch.utils.data.Dataset,
        sampler: ShardedBatchSampler,
        batches_of: Callable[[list[torch.Tensor]], Iterator[Any]] | None = None,
        starting: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(dataset, batch_sampler=sampler, collate_fn=_as_batch)
        self._batches_of, self._starting = batches_of, starting

    def __iter__(self) -> Iterator[Any]:
        if self._starting is not None:
            self._starting()
        batches = super().__iter__() if self._batches_of is None else self._batches_of(list(self.batch_sampler))
        return batches if self._starting is None else _started(batches, self._starting)


def _started(batches: Iterator[Any], starting: Callable[[], Any]) -> Iterator[Any]:
    """``batches``, with ``starting`` called again once the first is out: Lightning lets go of the epoch before's
    loader only once it holds this one's iterator, after ``__iter__``, so a file let go of then is dropped now, not
    an epoch later (tests/data/test_pagecache.py saw both orders)."""
    for number, batch in enumerate(batches):
        yield batch
        if number == 0:
            starting()


class ResumableLoader(DeviceLoader):
    """A DataLoader Lightning can checkpoint mid-epoch (it implements state_dict/load_state_dict).

    Its state is the epoch and how many of its batches were trained; a resumed attempt skips
    exactly those, so an epoch interrupted by preemption still trains every sample once.
    """

    def __init__(
        self,
        dataset: torch.utils.data.Dataset,
        sampler: ShardedBatchSampler,
        batches_done: Callable[[], int],
        batches_of: Callable[[list[torch.Tensor]], Iterator[Any]] | None = None,
        starting: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(dataset, sampler, batches_of, starting)
        self._batches_done = batches_done

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.batch_sampler.epoch, "batches_done": self._batches_done()}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("epoch") == self.batch_sampler.epoch:
            self.batch_sampler.skip = int(state["batches_done"])


def _placed(partition: Partition, place: Callable[[Partition], Partition]) -> Partition:
    """The partition where it trains; one moved off the host holds no view of its file (its ids copied out), so
    the file's pages can leave the cache while it trains."""
    placed = place(partition)
    if placed.features is partition.features:
        return placed
    return dataclasses.replace(placed, ids=placed.ids.clone())


class Prefetcher:
    """Loads and verifies partitions on a background thread: the current one and the next.

    ``place``, once set, puts each partition where it trains (``snakeddp.data.device.resident``), on the same
    thread for those requested after it was set; ``get`` places one requested before.
    """

    def __init__(self, root: Path, entries: Sequence[dict[str, Any]]) -> None:
        self.root, self.entries = root, entries
        self.place: Callable[[Partition], Partition] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snakeddp-prefetch")
        self._loaded: dict[int, Future[Partition]] = {}
        # A trained partition's pages leave the page cache once its epoch is done (bench 14: training read every
        # partition through the cache of a 3 GB cgroup and left it there, a failcnt of 25,516).
        self._files: dict[int, Path] = {}
        self._readers = pagecache.Readers(self._read_next)

    def request(self, index: int) -> None:
        if index not in self._loaded:
            self._loaded[index] = self._pool.submit(self._entry_then_load, index, self.place)

    def _entry_then_load(self, index: int, place: Callable[[Partition], Partition] | None) -> Partition:
        # On this thread: a streamed dataset's entry is waited for until ingestion publishes it.
        entry = self.entries[index]
        self._files[index] = self.root / entry["file"]
        partition = self._load(entry, place)
        if place is not None:
            # The host's copy of a partition placed off the host ended here: its file is let go of at once. A
            # partition trained on the host ends on the training thread, which lets go of it (``starting``).
            self.let_go()
        return partition

    def _load(self, entry: dict[str, Any], place: Callable[[Partition], Partition] | None) -> Partition:
        path = self.root / entry["file"]
        partition = read_partition(path, entry)
        self._readers.read(path, partition)
        if place is None:
            # Not hashed here (handed over by ingestion, or trained again), so maybe not in the cache: read ahead, not
            # faulted in by the step's gathers.
            pagecache.read_ahead(path)
            return partition
        return _placed(partition, place)

    def let_go(self) -> None:
        """Drop the pages of the partitions no longer held (an epoch's, once the next epoch's loader replaced its
        own), but the ones read again next; a refused advice is no error (``pagecache``)."""
        self._readers.let_go()

    def _read_next(self, path: Path) -> bool:
        """Whether a file let go of is one a held partition is read from: the next epoch's, or this one's again."""
        # A copy (one step under the GIL): the loading thread may let go of a partition while this one requests.
        held = self._loaded.copy()
        return self.place is None and any(self._files.get(index) == path for index in held)

    def get(self, index: int) -> tuple[Partition, float]:
        """The partition and the seconds the caller waited for it."""
        self.request(index)
        # Whatever else is held belongs to earlier epochs: drop it so memory stays at two partitions.
        for stale in [i for i in self._loaded if i != index]:
            self._loaded.pop(stale)
        start = time.perf_counter()
        partition = self._loaded[index].result()
        if self.place is not None:
            # Requested before ``place`` was set (the first partition, as the DataModule is made): placed once here.
            partition = _placed(partition, self.place)
            self._loaded[index] = placed = Future()
            placed.set_result(partition)
        return partition, time.perf_counter() - start

    def close(self) -> None:
        if isinstance(self.entries, Stream):
            self.entries.close()  # a partition still awaited from ingestion is not waited for any longer
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._loaded.clear()
        self.let_go()  # the next partition, prefetched for an epoch the run will not train


class PartitionDataModule(pl.LightningDataModule):
    """Train on partition ``current_epoch mod P``; validate on the single validation file."""

    #: What loads the partitions (bench 3 prices the checksum with one that skips it).
    prefetcher_type: type[Prefetcher] = Prefetcher

    def __init__(
        self,
        manifest_path: str | Path,
        batch_size: int,
        seed: int,
        trace: bool = False,
        augment: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.manifest_path = Path(manifest_path)
        # A windowed table's runs start beside its ingestion, on a stream manifest (snakeddp.data.stream).
        streamed = read_json(self.manifest_path) if self.manifest_path.name.startswith("stream-") else None
        self.manifest = streamed if streamed is not None and is_stream(streamed) else load_manifest(self.manifest_path)
        # A dataset of images (uint8 partitions) is scaled, standardised and augmented as batches leave it.
        self.images = ImageBatches(self.task, augment or {}, seed) if self.task.get("input_shape") else None
        self.root = self.manifest_path.parent
        self.batch_size, self.seed, self.trace_enabled = batch_size, seed, trace
        self.stream = Stream(self.root, self.manifest) if streamed is self.manifest else None
        self.train_entries: Sequence[dict[str, Any]] = (
            self.stream if self.stream is not None else self.manifest["train"]
        )
        self.num_partitions = len(self.train_entries)
        self.prefetcher: Prefetcher | None = None
        self.val: Partition | None = None
        self.epoch_partition: int | None = None
        self.epoch_wait_s = 0.0
        self.epoch_samples = 0
        self.trace: list[torch.Tensor] = []
        # The first epoch's partition (a fresh run's) loads and is verified while the Trainer is built and
        # Lightning initialises CUDA; a resumed run asks for its own in setup, and this one is dropped.
        self.prefetcher = self.prefetcher_type(self.root, self.train_entries)
        self.prefetcher.request(self.partition_for_epoch(0))

    @property
    def task(self) -> dict[str, Any]:
        return self.manifest["task"]

    def partition_for_epoch(self, epoch: int) -> int:
        return epoch % self.num_partitions

    def setup(self, stage: str) -> None:
        device = self._device()
        if self.prefetcher is None:
            self.prefetcher = self.prefetcher_type(self.root, self.train_entries)
        if self.images is None and on_device.is_cuda(device):
            # Image batches are scaled and augmented on the host: they stream to the device instead.
            self.prefetcher.place = lambda partition: on_device.resident(partition, device)
        self.prefetcher.request(self.partition_for_epoch(self.trainer.current_epoch if self.trainer else 0))
        if self.val is None and self.stream is None:
            self._load_val()

    def _load_val(self) -> Partition:
        """Validation, from the manifest; a streamed dataset's once ingestion has written it, last."""
        val = self.manifest["val"] if self.stream is None else self.stream.val()
        self.val = read_partition(self.root / val["file"], val)
        if self.prefetcher is not None and self.prefetcher.place is not None:
            self.val = self.prefetcher.place(self.val)
        return self.val

    def completed(self) -> tuple[Path, str] | None:
        """A streamed run's data identity, once every partition is published: the dataset's manifest (its path and
        sha256) and, from now on, ``self.manifest``; None for a run that trained on the manifest."""
        if self.stream is None:
            return None
        path, sha256, self.manifest = self.stream.completed()
        return path, sha256

    def _sampler(self, partition: Partition, epoch: int, shuffle: bool) -> ShardedBatchSampler:
        return ShardedBatchSampler(
            len(partition),
            self.batch_size,
            self.trainer.global_rank,
            self.trainer.world_size,
            self.seed,
            epoch,
            shuffle,
        )

    def train_dataloader(self) -> DataLoader:
        # Lightning calls this at the start of every epoch (reload_dataloaders_every_n_epochs=1),
        # after a resume included, with current_epoch already restored.
        epoch = self.trainer.current_epoch
        index = self.partition_for_epoch(epoch)
        partition, waited = self.prefetcher.get(index)
        self.prefetcher.request(self.partition_for_epoch(epoch + 1))
        self.epoch_partition, self.epoch_wait_s, self.epoch_samples = index, waited, len(partition)
        self.trace = []
        dataset = _PartitionBatches(partition, self.trace if self.trace_enabled else None, self.images, epoch, True)
        sampler = self._sampler(partition, epoch, shuffle=True)
        batches_of = self._batches_of(dataset)
        # As the epoch's batches start, the epoch before's loader is gone: its partition's pages leave the cache.
        starting = self.prefetcher.let_go
        return ResumableLoader(dataset, sampler, lambda: batches_done(self.trainer), batches_of, starting)

    def val_dataloader(self) -> DataLoader:
        if self.val is None and self.stream is not None:
            # Lightning asks for it as fit starts, and ingestion writes validation last: its rows are read when it
            # is first iterated, after epoch 0's training (no sanity check), its size is the stream manifest's.
            batches = _PartitionBatches(_Deferred(self._load_val, self.manifest["records"]["val"]), None, self.images)
            sampler = self._sampler(batches.partition, 0, shuffle=False)
            if not on_device.is_cuda(self._device()):
                return DeviceLoader(batches, sampler)
            return DeviceLoader(batches, sampler, batches_of=lambda order: self._deferred_batches(batches, order))
        if self.val is None:
            self._load_val()
        sampler = self._sampler(self.val, 0, shuffle=False)
        batches = _PartitionBatches(self.val, None, self.images)
        return DeviceLoader(batches, sampler, batches_of=self._batches_of(batches))

    def _deferred_batches(self, batches: _PartitionBatches, order: list[torch.Tensor]) -> Iterator[Any]:
        batches.partition = self.val if self.val is not None else self._load_val()
        return self._batches_of(batches)(order)

    def _device(self) -> torch.device:
        return self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")

    def _batches_of(self, dataset: _PartitionBatches) -> Callable[[list[torch.Tensor]], Iterator[Any]] | None:
        """How a CUDA device's batches are made (snakeddp.data.device); None off CUDA, where the DataLoader
        gathers each batch on the host as the step takes it (pinning it there would be a wasted copy)."""
        device, partition = self._device(), dataset.partition
        if not on_device.is_cuda(device):
            return None
        if on_device.on_device(partition, device):
            on_device.hand_over(partition, device)
            return lambda batches: on_device.gathered(partition, batches, device, dataset.trace)
        return lambda batches: on_device.streamed(dataset.__getitems__, batches, device)

    def teardown(self, stage: str) -> None:
        if self.prefetcher is not None:
            self.prefetcher.close()
            self.prefetcher = None
