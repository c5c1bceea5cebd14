"""The baseline: a minimal hand-written PyTorch DDP loop, in the style of the reference tutorials.

torch.distributed + DistributedDataParallel + DistributedSampler, the partition of epoch e
(e mod P) loaded synchronously at the start of the epoch, validation and a rank-0 checkpoint
after every epoch; no Lightning. Started by torchrun exactly like ``snakeddp.train``::

    python -m torch.distributed.run --standalone --nproc-per-node=2 -m bench.baselines.handwritten_ddp \\
        --manifest results/data/<dataset>/manifest-4.json --epochs 4 --batch-size 128 --out timings.json

Batches are gathered with one indexing op (``features[indices]``) rather than one
``__getitem__`` per sample, so the baseline is as fast as a careful hand-written loop gets.
``--format pickle`` reads the tutorial's pickled partitions instead (the memory benchmark); ``--device cuda``
trains on one GPU per rank over NCCL, each partition moved to it whole, ``--precision bf16-mixed`` under
torch.autocast (what Lightning's bf16-mixed does).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

# Before init_process_group: its collectives take `group=group.WORLD` as a default argument, evaluated when it is
# imported. Imported later (DDP's first use of torch._dynamo imports it), they would hold the group past
# destroy_process_group, and with it gloo's threads into the interpreter's exit (the end of main).
import torch.distributed.nn  # noqa: F401
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from bench.baselines.tutorial import read_pickle


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", required=True, type=Path)
    parser.add_argument("--epochs", required=True, type=int)
    parser.add_argument("--batch-size", required=True, type=int)
    parser.add_argument("--hidden", type=int, nargs="*", default=[], help="hidden widths (none: the linear model)")
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--format", choices=("safetensors", "pickle"), default="safetensors")
    parser.add_argument("--checkpoint", type=Path, help="rank 0 saves model + optimizer here after every epoch")
    parser.add_argument("--out", type=Path, help="rank 0 writes per-epoch timings here (JSON)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: one GPU per rank, NCCL")
    parser.add_argument("--precision", choices=("32-true", "bf16-mixed"), default="32-true")
    return parser.parse_args()


def build(features: int, hidden: list[int]) -> nn.Module:
    layers: list[nn.Module] = []
    width = features
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    return nn.Sequential(*layers, nn.Linear(width, 1))


def load(path: Path, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    data = read_pickle(path.with_suffix(".pt")) if fmt == "pickle" else load_file(path)
    return data["features"], data["labels"]


def validate(model: nn.Module, features: torch.Tensor, labels: torch.Tensor, rank: int, world: int) -> float:
    """Mean validation loss over every rank's shard."""
    model.eval()
    shard = slice(rank, None, world)
    with torch.no_grad():
        loss = F.binary_cross_entropy_with_logits(model(features[shard]), labels[shard], reduction="sum")
    totals = torch.stack([loss, torch.tensor(float(len(labels[shard])), device=loss.device)])
    dist.all_reduce(totals)
    model.train()
    return float(totals[0] / totals[1])


def main() -> None:
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed")
    torch.manual_seed(42)
    manifest = json.loads(args.manifest.read_text())
    root = args.manifest.parent
    val_features, val_labels = (t.to(device) for t in load(root / manifest["val"]["file"], args.format))
    model = build(manifest["task"]["num_features"], args.hidden).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    rows = []
    for epoch in range(args.epochs):
        start = time.perf_counter()
        entry = manifest["train"][epoch % len(manifest["train"])]
        features, labels = (t.to(device) for t in load(root / entry["file"], args.format))
        sampler = DistributedSampler(range(len(features)), num_replicas=world, rank=rank, shuffle=True, seed=42)
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler), device=device)
        if cuda:
            torch.cuda.synchronize()
        loaded = time.perf_counter()
        for batch in order.split(args.batch_size):
            optimizer.zero_grad()
            with autocast:
                loss = F.binary_cross_entropy_with_logits(model(features[batch]).float(), labels[batch])
            loss.backward()
            optimizer.step()
        if cuda:
            torch.cuda.synchronize()
        trained = time.perf_counter()
        val_loss = validate(model, val_features, val_labels, rank, world)
        if rank == 0 and args.checkpoint:
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, args.checkpoint)
        rows.append(
            {
                "epoch": epoch,
                "samples": len(order) * world,
                "load_s": loaded - start,
                "train_s": trained - loaded,
                "epoch_s": time.perf_counter() - start,
                "val_loss": val_loss,
            }
        )
    if rank == 0 and args.out:
        args.out.write_text(json.dumps(rows))
    # With the model's reference to the group gone, destroy_process_group ends the group here: gloo's worker
    # threads are joined while Python is alive. One left running drops validate's tensors once done with them,
    # which takes the GIL; if Python is finalizing by then, the thread is ended through a noexcept destructor:
    # "terminate called without an active exception", exit -6, now and then (pytorch/pytorch#190489).
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
