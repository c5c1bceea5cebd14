"""Build the Lightning Trainer for a run: its strategy over the launcher's processes, callbacks, checkpoints."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, EarlyStopping
from lightning.pytorch.loggers import Logger

from snakeddp.cluster import Launcher, LaunchError, Layout
from snakeddp.compat.lightning import hand_sigterm_to_preemption
from snakeddp.run.attempt import CHECKPOINT_DIR, LAST
from snakeddp.training.callbacks import EpochMetrics, Preemption, RankHosts, SampleTrace
from snakeddp.training.checkpoints import EpochCheckpoint
from snakeddp.training.phases import Phases
from snakeddp.training.progress import EpochProgress
from snakeddp.training.strategies import build_strategy
from snakeddp.util.fsutil import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints appear whole or not at all, so a kill during a save never corrupts last.ckpt.

    ``seconds``: time spent writing them (provenance timing.phases).
    """

    seconds = 0.0

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        start = time.perf_counter()
        atomic_write(path, lambda handle: torch.save(checkpoint, handle))
        self.seconds += time.perf_counter() - start


def accelerator_and_backend(requested: str) -> tuple[str, str]:
    """cpu+gloo, or gpu+nccl when a GPU is asked for (or visible, with auto)."""
    has_gpu = torch.cuda.is_available()
    if requested == "gpu" and not has_gpu:
        raise LaunchError(
            "launch.accelerator=gpu but torch sees no CUDA device (torch.cuda.is_available() is False). "
            "HINT: run on a GPU node with a CUDA build of torch, or set launch.accelerator: cpu."
        )
    use_gpu = requested == "gpu" or (requested == "auto" and has_gpu)
    return ("gpu", "nccl") if use_gpu else ("cpu", "gloo")


def build_trainer(
    cfg: Mapping[str, Any],
    launcher: Launcher,
    layout: Layout,
    run_dir: Path,
    loggers: Sequence[Logger] = (),
    extra_callbacks: Sequence[Callback] = (),
    shards_itself: bool = True,
) -> tuple[pl.Trainer, dict[str, Any]]:
    """The Trainer, and the callbacks other code reads results from (by name).

    ``loggers`` and ``extra_callbacks`` come from the trackers; ``shards_itself`` is False for a
    custom DataModule, which then gets Lightning's DistributedSampler.
    """
    trainer_cfg, launch = cfg["trainer"], cfg["launch"]
    accelerator, backend = accelerator_and_backend(launch["accelerator"])
    checkpoints = run_dir / CHECKPOINT_DIR
    stop_cfg = trainer_cfg["early_stopping"]
    checkpoint_io = AtomicCheckpointIO()
    named: dict[str, Any] = {
        "checkpoint": EpochCheckpoint(
            dirpath=checkpoints,
            filename="epoch{epoch:03d}-val_loss{val_loss:.4f}",
            auto_insert_metric_name=False,
            monitor="val_loss",
            mode="min",
            save_top_k=trainer_cfg["save_top_k"],
        ),
        "metrics": EpochMetrics(run_dir / "metrics.csv"),
        "preemption": Preemption(trainer_cfg["preempt_signals"], checkpoints / LAST),
        "hosts": RankHosts(os.environ.get("SLURMD_NODENAME") or os.environ.get("AZUREML_NODE_NAME")),
        "phases": Phases(checkpoint_io),
    }
    named["progress"] = EpochProgress(run_dir.name, named["metrics"])
    if stop_cfg["enabled"]:
        named["early_stopping"] = EarlyStopping(
            monitor="val_loss", mode="min", patience=stop_cfg["patience"], min_delta=stop_cfg["min_delta"]
        )
    if trainer_cfg["trace_samples"]:
        named["trace"] = SampleTrace(run_dir / "trace")
    strategy = build_strategy(trainer_cfg, accelerator, backend, launcher.lightning_environment(layout), checkpoint_io)
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=launch["devices"],
        num_nodes=launch["nodes"],
        strategy=strategy,
        precision=trainer_cfg["precision"],
        max_epochs=trainer_cfg["max_epochs"],
        callbacks=[*named.values(), *extra_callbacks],
        logger=list(loggers) or False,
        default_root_dir=run_dir,
        reload_dataloaders_every_n_epochs=1,
        # Sharding is ours (ShardedBatchSampler): exact, no duplicated samples.
        use_distributed_sampler=not shards_itself,
        enable_progress_bar=False,
        enable_model_summary=layout.is_main,
        num_sanity_val_steps=0,
    )
    if "SIGTERM" in trainer_cfg["preempt_signals"]:
        hand_sigterm_to_preemption(trainer)
    return trainer, named
