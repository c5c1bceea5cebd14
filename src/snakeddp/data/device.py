"""Batches gathered where the model trains: a partition moved to the GPU once, or streamed to it a batch ahead.

The host path (``snakeddp.data.module``'s DataLoader) gathers each batch on the host, pins it, and Lightning
copies it inside the step: on one H200 that ran at 0.75x a hand-written loop that keeps the partition on the
GPU and gathers each batch there (bench/results.md, 15.). On a CUDA device, instead:

- a partition that fits (``RESIDENT_SHARE`` of the device's free memory) is moved there once, on the
  prefetch thread while the one before it trains, and each batch is gathered there: the epoch's order is
  copied to the device once and cut into the sampler's batches, as the hand-written loop does;
- a larger one stays in host memory: each batch is gathered on the host into pinned memory and copied on a
  side stream while the batch before it trains.

Either way a batch holds the sampler's samples in the sampler's order, with the host path's values
(tests/data/test_device.py compares both paths batch by batch); ids stay on the host, where the trace reads them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import torch

from snakeddp.data.partitions import Partition

#: A partition is kept on the device when it takes at most this share of the device's free memory: the next
#: epoch's partition lands beside it while it trains, and the model, its optimizer state and activations
#: need the rest.
RESIDENT_SHARE = 0.25

Batch = tuple[torch.Tensor, torch.Tensor]


def is_cuda(device: torch.device) -> bool:
    return device.type == "cuda"


def tensor_bytes(partition: Partition) -> int:
    """What moving the partition to the device takes: its features and labels (ids stay on the host)."""
    return sum(t.numel() * t.element_size() for t in (partition.features, partition.labels))


def fits(partition: Partition, device: torch.device) -> bool:
    """Whether the partition is small enough to live on ``device`` (a CUDA device) while it trains."""
    free, _ = torch.cuda.mem_get_info(device)
    return tensor_bytes(partition) <= RESIDENT_SHARE * free


def resident(partition: Partition, device: torch.device) -> Partition:
    """The partition with its features and labels on ``device``, where they fit; else as it is.

    Runs on the prefetch thread: the copy goes on a stream of its own and is finished before the partition
    is handed over, so the training stream never waits for it (``hand_over`` then ties the memory to it).
    """
    if not is_cuda(device) or on_device(partition, device) or not fits(partition, device):
        return partition
    stream = torch.cuda.Stream(device)
    with torch.cuda.device(device), torch.cuda.stream(stream):
        features, labels = (t.to(device, non_blocking=False) for t in (partition.features, partition.labels))
    stream.synchronize()
    return dataclasses.replace(partition, features=features, labels=labels)


def on_device(partition: Partition, device: torch.device) -> bool:
    return partition.features.device == device


def hand_over(partition: Partition, device: torch.device) -> None:
    """Tie the device memory of a partition moved on the prefetch thread's stream to the training stream:
    without it the caching allocator could give that memory to the next partition's copy while kernels the
    training stream queued still read it."""
    if is_cuda(device) and on_device(partition, device):
        stream = torch.cuda.current_stream(device)
        partition.features.record_stream(stream)
        partition.labels.record_stream(stream)


def gathered(
    partition: Partition, batches: Sequence[torch.Tensor], device: torch.device, trace: list[torch.Tensor] | None
) -> Iterator[Batch]:
    """The batches of a partition that lives on ``device``, gathered there (index_select)."""
    if not batches:
        return
    # One copy of the epoch's order, then views of it: no host-to-device copy per batch.
    order = torch.cat(list(batches)).to(device, non_blocking=True)
    for indices, on_device_indices in zip(batches, order.split([len(b) for b in batches]), strict=True):
        if trace is not None:
            trace.append(partition.ids[indices])
        yield partition.features.index_select(0, on_device_indices), partition.labels.index_select(0, on_device_indices)


def streamed(
    gather: Callable[[torch.Tensor], Batch], batches: Sequence[torch.Tensor], device: torch.device
) -> Iterator[Batch]:
    """The batches ``gather`` makes on the host, each copied to ``device`` from pinned memory on a side stream
    while the one before it trains. Off CUDA there is nothing to overlap: the host's batches as they are."""
    if not is_cuda(device):
        yield from (gather(indices) for indices in batches)
        return
    side, training = torch.cuda.Stream(device), torch.cuda.current_stream(device)

    def ship(indices: torch.Tensor) -> tuple[list[torch.Tensor], torch.cuda.Event]:
        host = [t.pin_memory() for t in gather(indices)]
        with torch.cuda.stream(side):
            # The pinned buffers may be freed right away: the host allocator keeps them until this copy ends.
            moved = [t.to(device, non_blocking=True) for t in host]
        return moved, side.record_event()

    ahead = ship(batches[0]) if batches else None
    for i in range(len(batches)):
        moved, copied = ahead
        ahead = ship(batches[i + 1]) if i + 1 < len(batches) else None
        training.wait_event(copied)
        for tensor in moved:
            tensor.record_stream(training)
        features, labels = moved
        yield features, labels
