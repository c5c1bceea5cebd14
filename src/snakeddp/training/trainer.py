"""Build the Lightning Trainer for a run: its strategy over the launcher's processes, callbacks, checkpoints."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, EarlyStopping
from lightning.pytorch.loggers import Logger

from snakeddp import platforms
from snakeddp.cluster import Launcher, Layout
from snakeddp.cluster.hang import HangTimeout
from snakeddp.compat.lightning import hand_sigterm_to_preemption
from snakeddp.config import parts
from snakeddp.environment import cuda
from snakeddp.environment.capture import accelerator_and_backend
from snakeddp.errors import MachineRefusal
from snakeddp.provenance.record import Outcome
from snakeddp.run import requirements, variables
from snakeddp.run.layout import RunPaths, checkpoint_name
from snakeddp.run.tries import write_saved
from snakeddp.training.callbacks import (
    EpochMetrics,
    MonitoredMetric,
    Preemption,
    RankHosts,
    SampleTrace,
)
from snakeddp.training.checkpoints import EpochCheckpoint, HeldStops
from snakeddp.training.livestatus import LiveStatus
from snakeddp.training.phases import Phases
from snakeddp.training.progress import EpochProgress
from snakeddp.training.strategies import build_strategy
from snakeddp.util.fsutil import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints appear whole or not at all, so a kill during a save never corrupts last.ckpt.

    ``seconds``: time spent writing them (provenance timing.phases). After each checkpoint saved whole in
    ``run_dir``'s checkpoints/ (top-k or last.ckpt) goes last.json, naming it with the step it holds and when
    (run.tries: what a try that does not complete kept, and which checkpoint the next try resumes); ``saving``
    says a save is under way (the watch gives one a long phase's limit).
    """

    def __init__(self, run_dir: Path | None = None) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.seconds = 0.0
        self.saving = False
        self.kept: list[Callable[[], None]] = []
        """Called after each checkpoint saved whole (LiveStatus: what a try that stops later keeps)."""

    def is_saving(self) -> bool:
        return self.saving

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        start = time.perf_counter()
        self.saving = True
        try:
            atomic_write(path, lambda handle: torch.save(checkpoint, handle), what="the checkpoint")
        finally:
            self.saving = False
        path = Path(path)
        # Lightning names the top-k by their real path, Preemption last.ckpt by the run directory's.
        if self.run_dir is not None and path.parent.resolve() == RunPaths(self.run_dir).checkpoints.resolve():
            step, epoch = int(checkpoint.get("global_step", 0)), int(checkpoint.get("epoch", 0))
            write_saved(self.run_dir, step, epoch, path.name)
        self.seconds += time.perf_counter() - start
        for kept in self.kept:
            kept()


@dataclass(frozen=True)
class Callbacks:
    """The callbacks snakeddp gives a run's Trainer, in the order Lightning calls them but for the
    checkpoint, which Lightning moves last; the run reads its results from them after fit."""

    held: HeldStops
    """First: a stop that lands once an epoch's end hooks begin waits for its checkpoints (training.checkpoints)."""
    monitor: MonitoredMetric
    """Before the others: a model that does not log trainer.monitor's metric stops every rank before any callback
    ranks epochs by it."""
    checkpoint: EpochCheckpoint
    """The top-k by trainer.monitor and last.ckpt; its best and last paths go to provenance."""
    metrics: EpochMetrics
    """metrics.csv, one row per epoch (rank 0)."""
    preemption: Preemption
    """Stops every rank at the same step on a preemption signal and saves last.ckpt."""
    hosts: RankHosts
    """Where every rank ran (provenance's launch.ranks)."""
    phases: Phases
    """Where the process's wall time went (provenance's timing.phases)."""
    progress: EpochProgress
    """Prints each epoch's row; after ``metrics``, whose row it prints."""
    live: LiveStatus
    """status.json with every post and the try's account (rank 0; training.livestatus)."""
    early_stopping: EarlyStopping | None = None
    """Only with trainer.early_stopping.enabled."""
    trace: SampleTrace | None = None
    """Only with trainer.trace_samples."""

    def all(self) -> list[Callback]:
        """Every callback present, in field order."""
        return [callback for callback in (getattr(self, f.name) for f in fields(self)) if callback is not None]

    def outcome(self, trainer: pl.Trainer, started_at: str, seconds: float) -> Outcome:
        """What the fit produced, for the provenance record (rank 0, after fit)."""
        stopper, score = self.early_stopping, self.checkpoint.best_model_score
        ranked = score is not None and bool(torch.isfinite(score))
        diverged = self.monitor.diverged_at is not None
        return Outcome(
            started_at=started_at,
            seconds=seconds,
            world_size=trainer.world_size,
            # The file, not the callback's memory: an attempt that resumes at max_epochs trains no epoch.
            metrics=self.metrics.read(),
            # All epochs NaN: Lightning ranks the first as inf, which is no score (and no JSON).
            best_checkpoint=self.checkpoint.best_model_path if ranked else "",
            best_score=float(score) if ranked else None,
            last_checkpoint=self.checkpoint.last_model_path,
            stopped_early=(stopper is not None and stopper.stopped_epoch > 0) or diverged,
            diverged=diverged,
            ranks=self.hosts.ranks,
            phases=self.phases.record,
        )


def check_precision(
    precision: str, accelerator: str, device: cuda.Device | None = None, requested: str = "cpu"
) -> None:
    """What Lightning would train other than asked, stopped before training: bf16 on a GPU without native
    bfloat16 (before compute capability 8.0; ``device`` is this rank's own, as the checks found it) would be
    emulated, many times slower than fp16, and Lightning says nothing; 16-mixed on the CPU, which Lightning
    turns into bf16-mixed with a warning while the run's record would say 16-mixed (the workflow refuses it
    before any job; ``requested``: the run's launch.accelerator). Neither is retried: any attempt meets it."""
    try:
        requirements.check_precision(precision, accelerator, requested)
    except requirements.PrecisionError as error:
        raise MachineRefusal(str(error)) from None
    if accelerator != "gpu" or not precision.startswith("bf16") or device is None or device.capability >= (8, 0):
        return
    major, minor = device.capability
    raise MachineRefusal(
        f"trainer.precision={precision}, and {device.name} (compute capability "
        f"{major}.{minor}) has no native bfloat16, which needs 8.0 or newer. HINT: set trainer.precision: 16-mixed "
        "(or 32-true) for these GPUs, or run on A100/H100-class ones."
    )


def build_trainer(
    trainer_cfg: parts.Trainer,
    launch: parts.Launch,
    launcher: Launcher,
    layout: Layout,
    run_dir: Path,
    loggers: Sequence[Logger] = (),
    extra_callbacks: Sequence[Callback] = (),
    shards_itself: bool = True,
) -> tuple[pl.Trainer, Callbacks]:
    """The Trainer, and its callbacks that other code reads results from.

    ``loggers`` and ``extra_callbacks`` come from the trackers; ``shards_itself`` is False for a
    custom DataModule, which then gets Lightning's DistributedSampler.
    """
    accelerator, backend = accelerator_and_backend(variables.accelerator(launch, os.environ))
    device = None
    if accelerator == "gpu":
        # Before the first CUDA call: a GPU run never falls back to the CPU, nor meets "no kernel image".
        device = cuda.check_device(layout.local_rank, ranks_on_node=layout.local_world_size)
        if layout.local_rank == 0:
            print(f"snakeddp: {layout.local_world_size} rank(s) on {device}", file=sys.stderr, flush=True)
    check_precision(trainer_cfg.precision, accelerator, device, launch.accelerator)
    checkpoint_io = AtomicCheckpointIO(run_dir)
    callbacks = _callbacks(trainer_cfg, run_dir, checkpoint_io)
    strategy = build_strategy(
        trainer_cfg,
        accelerator,
        backend,
        launcher.lightning_environment(layout),
        checkpoint_io,
        launch.accelerator,
        HangTimeout(launch.hang_timeout),
    )
    trainer = pl.Trainer(
        accelerator=accelerator,
        # Where the platform placed the ranks itself (Spark), the same world size in its own layout.
        devices=layout.local_world_size if launcher.places_ranks else launch.devices,
        num_nodes=layout.num_nodes if launcher.places_ranks else launch.nodes,
        strategy=strategy,
        precision=trainer_cfg.precision,
        # torch.use_deterministic_algorithms and CUBLAS_WORKSPACE_CONFIG, set by Lightning before CUDA starts.
        deterministic=trainer_cfg.deterministic,
        max_epochs=trainer_cfg.max_epochs,
        callbacks=[*callbacks.all(), *extra_callbacks],
        logger=list(loggers) or False,
        default_root_dir=run_dir,
        reload_dataloaders_every_n_epochs=1,
        # Sharding is ours (ShardedBatchSampler): exact, no duplicated samples.
        use_distributed_sampler=not shards_itself,
        enable_progress_bar=False,
        enable_model_summary=layout.is_main,
        num_sanity_val_steps=0,
    )
    if "SIGTERM" in trainer_cfg.preempt_signals:
        hand_sigterm_to_preemption(trainer)
    return trainer, callbacks


def _callbacks(trainer_cfg: parts.Trainer, run_dir: Path, checkpoint_io: AtomicCheckpointIO) -> Callbacks:
    """The run's own callbacks: checkpoints each epoch, its metrics and progress lines, preemption, hosts,
    phases, and early stopping and the sample trace where the config turns them on."""
    paths = RunPaths(run_dir)
    monitor, stop_cfg = trainer_cfg.monitor, trainer_cfg.early_stopping
    metrics = EpochMetrics(paths.metrics)
    phases = Phases(checkpoint_io)
    held = HeldStops()
    return Callbacks(
        held=held,
        monitor=MonitoredMetric(monitor.metric, run_dir.name),
        checkpoint=EpochCheckpoint(
            held=held,
            dirpath=paths.checkpoints,
            filename=checkpoint_name(monitor.metric),
            auto_insert_metric_name=False,
            monitor=monitor.metric,
            mode=monitor.mode,
            save_top_k=trainer_cfg.save_top_k,
        ),
        metrics=metrics,
        preemption=Preemption(list(trainer_cfg.preempt_signals), paths.last_checkpoint),
        hosts=RankHosts(platforms.scheduler_node(os.environ), executor=platforms.placement(os.environ)),
        phases=phases,
        progress=EpochProgress(run_dir.name, metrics),
        live=LiveStatus(run_dir, phases),
        early_stopping=EarlyStopping(
            monitor=monitor.metric,
            mode=monitor.mode,
            patience=stop_cfg.patience,
            min_delta=stop_cfg.min_delta,
        )
        if stop_cfg.enabled
        else None,
        trace=SampleTrace(paths.trace) if trainer_cfg.trace_samples else None,
    )
