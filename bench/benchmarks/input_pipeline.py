"""3. Input pipeline: PartitionDataModule across partition switches vs an in-memory tensor.

Both run the same Lightning loop in this process (one rank, one thread) with the tutorial's
one-layer model, too cheap to matter: the only difference is where batches come from. Ours
reads one partition per epoch from disk (memory-mapped, sha256-verified, the next one
prefetched on a background thread); the baseline holds every partition in memory before the
clock starts and gathers its batches the same way. Ours runs twice: with the files in the
page cache, and with them evicted before the run (a dataset larger than memory).
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from bench.datasets import data_config, ensure_dataset
from bench.harness import Context, Result, alternate, evict, median, paired_ratio, target_figure
from snakeddp import config as configuration
from snakeddp.data.module import PartitionDataModule, Prefetcher
from snakeddp.data.partitions import load_manifest, read_partition
from snakeddp.training.callbacks import EpochMetrics
from snakeddp.training.models import build_model

NAME = "input_pipeline"
TITLE = "3. Input pipeline"


class _Batches(Dataset):
    """Whole batches gathered by one indexing op, as ours does."""

    def __init__(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        self.features, self.labels = features, labels

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.features[index], self.labels[index]

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(indices)
        return self.features[index], self.labels[index]


def _as_batch(batch: Any) -> Any:
    return batch


class InMemoryDataModule(pl.LightningDataModule):
    """The baseline: every partition already in memory; epoch e shuffles partition e mod P."""

    def __init__(self, partitions: list[tuple[torch.Tensor, torch.Tensor]], batch_size: int, seed: int) -> None:
        super().__init__()
        self.partitions, self.batch_size, self.seed = partitions, batch_size, seed

    def train_dataloader(self) -> DataLoader:
        epoch = self.trainer.current_epoch
        features, labels = self.partitions[epoch % len(self.partitions)]
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        sampler = BatchSampler(RandomSampler(range(len(features)), generator=generator), self.batch_size, False)
        return DataLoader(_Batches(features, labels), batch_sampler=sampler, collate_fn=_as_batch)


class _UnverifiedPrefetcher(Prefetcher):
    """Ours without the sha256 check: a diagnostic that prices the verification, never a way to train."""

    def _load(self, entry: dict[str, Any], place: Any) -> Any:
        partition = read_partition(self.root / entry["file"])
        return partition if place is None else place(partition)


class UnverifiedDataModule(PartitionDataModule):
    """PartitionDataModule with _UnverifiedPrefetcher (otherwise unchanged)."""

    prefetcher_type = _UnverifiedPrefetcher


class TrainClock(pl.Callback):
    """Wall time from the first training step's set-up to the end of the last epoch."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.seconds = time.perf_counter() - self._start


def fit(
    datamodule: pl.LightningDataModule,
    task: dict[str, Any],
    epochs: int,
    metrics_dir: Path,
    model: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train the one-layer model (or the built-in ``model``) for ``epochs``; return samples/s and the
    per-epoch metrics rows."""
    linear = {"name": "linear", "optimizer": "sgd", "lr": 0.1, "weight_decay": 0.0}
    model = build_model(model or linear, task)
    clock, metrics = TrainClock(), EpochMetrics(metrics_dir / "metrics.csv")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        reload_dataloaders_every_n_epochs=1,
        use_distributed_sampler=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=[clock, metrics],
    )
    trainer.fit(model, datamodule=datamodule)
    samples = sum(int(row["samples"]) for row in metrics.rows)
    return {"samples_per_s": samples / clock.seconds, "seconds": clock.seconds, "rows": metrics.rows}


def run(ctx: Context) -> Result:
    sizes = ctx.sizes
    parts = sizes.partitions_or(4)
    epochs = 2 * parts
    data = data_config(sizes.records, sizes.features, min(sizes.val_records, 1000), parts)
    manifest_path = ensure_dataset(ctx.scratch("data"), data)
    manifest = load_manifest(manifest_path)
    root = manifest_path.parent
    files = [root / entry["file"] for entry in manifest["train"]]
    batch_size = configuration.validate({})["trainer"]["batch_size"]
    loaded = (read_partition(path, entry) for path, entry in zip(files, manifest["train"], strict=True))
    in_memory = [(partition.features.clone(), partition.labels.clone()) for partition in loaded]
    task = manifest["task"]
    details: dict[str, list[dict[str, Any]]] = {}
    modules = {
        "ours_warm": PartitionDataModule,
        "ours_evicted": PartitionDataModule,
        "unverified": UnverifiedDataModule,
    }

    def case(key: str) -> Any:
        def measure() -> dict[str, float]:
            if key == "ours_evicted":
                for path in [*files, root / manifest["val"]["file"]]:
                    evict(path)
            if key == "in_memory":
                datamodule = InMemoryDataModule(in_memory, batch_size, seed=0)
            else:
                datamodule = modules[key](manifest_path, batch_size, seed=0)
            out = fit(datamodule, task, epochs, ctx.scratch(key))
            details.setdefault(key, []).append(out)
            return {"samples_per_s": out["samples_per_s"]}

        return measure

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    quiet = logging.getLogger("lightning.pytorch")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            samples = alternate(
                {key: case(key) for key in ("in_memory", "ours_warm", "ours_evicted", "unverified")},
                reps=sizes.reps_or(5),
                warmup=sizes.warmup_or(1),
            )
    finally:
        torch.set_num_threads(threads)
        quiet.setLevel(level)

    rates = {k: median([s["samples_per_s"] for s in v]) for k, v in samples.items()}
    waits = {k: _switch_waits(details[k]) for k in ("ours_warm", "ours_evicted")}
    result = Result(
        NAME,
        TITLE,
        raw={**samples, "epochs": {k: [d["rows"] for d in v] for k, v in details.items()}},
        sizes={"partitions": parts, "epochs": epochs, "records": sizes.records, "features": sizes.features},
    )
    for key, label in (("ours_evicted", "files evicted before the run"), ("ours_warm", "files in the page cache")):
        result.figures.append(
            target_figure(
                f"input.rate.{key}",
                f"samples/s over {epochs} epochs of {parts} partitions, {label}",
                "samples/s",
                rates[key],
                baseline=rates["in_memory"],
                ratio=paired_ratio(samples[key], samples["in_memory"], "samples_per_s"),
                ratio_of="ours ÷ in-memory",
                op=">=",
                threshold=0.9,
            )
        )
    for key, label in (("ours_evicted", "files evicted"), ("ours_warm", "page cache")):
        result.figures.append(
            target_figure(
                f"input.wait.{key}",
                f"time waiting for the next partition at switches, {label}",
                "% of epoch",
                100 * waits[key]["fraction"],
                ratio=waits[key]["fraction"],
                ratio_of="wait ÷ epoch time",
                op="<=",
                threshold=0.05,
            )
        )
    unverified = paired_ratio(samples["unverified"], samples["in_memory"], "samples_per_s")
    result.notes += [
        f"One process, one thread, batch {batch_size}, the tutorial's one-layer model (sgd): Lightning's per-step "
        "cost is the same in every case, so the ratio isolates what the data path adds. In-memory baseline: "
        f"{rates['in_memory']:,.0f} samples/s. Diagnostic, measured in the same rounds: ours with the checksum "
        f"check skipped reaches {unverified:.2f}× the in-memory rate.",
        "Waiting = `epoch_wait_s`, the time `train_dataloader` blocked on the prefetcher (metrics.csv column "
        "`data_wait_s`), over epoch time (train time + that wait), summed over the epochs after the first; "
        f"the first epoch's wait is start-up: {median(waits['ours_evicted']['first']) * 1e3:.0f} ms evicted, "
        f"{median(waits['ours_warm']['first']) * 1e3:.0f} ms cached. Worst single switch: "
        f"{100 * waits['ours_evicted']['worst']:.1f}% evicted, {100 * waits['ours_warm']['worst']:.1f}% cached.",
    ]
    missed = [f for f in result.figures if f.met is False and f.key.startswith("input.rate")]
    if missed and unverified < 0.9:
        extra_ms = 1e3 * batch_size * (1 / min(f.ours for f in missed) - 1 / rates["in_memory"])
        result.notes.append(
            f"Why the rate misses: not the checksum here (without it ours runs at {unverified:.2f}× in-memory, "
            "the same within the noise). It is per-batch work a DataLoader over a resident tensor does not do: "
            "the resumable loader's position bookkeeping (what makes a mid-epoch resume exact), the sharded "
            "sampler, and gathering rows from a memory-mapped file whose pages are mapped on first touch: about "
            f"{extra_ms:.2f} ms per batch of {batch_size}, next to a step of "
            f"{1e3 * batch_size / rates['in_memory']:.1f} ms for this one-layer model. It is a fixed cost per batch, "
            "so it vanishes in the ratio as soon as a step does real work (4. Training overhead, MLP rows). What "
            "would close it: profile the loader's per-batch path and move its bookkeeping out of Python "
            "(one index tensor per epoch sliced per batch); not done here."
        )
    elif missed:
        result.notes.append(
            "Why the rate misses: the prefetch thread hides the wait (see the wait rows) but not its work. "
            "Reading the next partition from disk and hashing it (BLAKE3, 1. Partition read times it) run while "
            "the current one trains, and a process hashes a file once (its stat stamp is trusted when the "
            "partition comes round again); when no core is idle (a busy machine, or one rank per core in DDP) "
            "that work takes its time from training. The evicted row straddles the target on this machine: in "
            "stop 21, 13 runs of this section with stop 20's code and this stop's alternating gave 0.79-0.96 "
            "(medians 0.88 and 0.87) for it and 0.91-1.04 for the cached row, so a single run's miss is no "
            "regression. What would close it: the hash once per node rather than once per rank, or a faster "
            "hash (1. Partition read); lowering the thread's priority only moves the cost into the wait at the "
            "switch (tried: the wait rose to ~20%)."
        )
    return result


def _switch_waits(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Waiting at partition switches (epochs after the first) as a fraction of their epoch time."""
    waited = total = worst = 0.0
    first = []
    for out in runs:
        rows = out["rows"]
        first.append(float(rows[0]["data_wait_s"]))
        for row in rows[1:]:
            wait, train = float(row["data_wait_s"]), float(row["train_seconds"])
            waited, total = waited + wait, total + wait + train
            worst = max(worst, wait / (wait + train))
    return {"fraction": waited / total if total else 0.0, "worst": worst, "first": first}
