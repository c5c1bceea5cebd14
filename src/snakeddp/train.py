"""Train one run: the single process entry point that every launcher starts.

One process (Lightning spawns more if launch.devices > 1)::

    python -m snakeddp.train --config results/runs/base/run.yaml --run-dir results/runs/base \\
        --data results/data/synthetic-0123456789/manifest.json

snakeddp's supervisor (the local profile's launcher), one node, two processes::

    python -m snakeddp.cluster.supervisor --nproc-per-node=2 -- python -m snakeddp.train --launcher direct ...

torchrun, one node, two processes::

    python -m torch.distributed.run --standalone --nproc-per-node=2 -m snakeddp.train --launcher torchrun ...

torchrun, two nodes (run on each node, NODE=0 on the first, 1 on the second)::

    torchrun --nnodes=2 --node-rank=$NODE --nproc-per-node=2 --rdzv-backend=c10d \\
        --rdzv-endpoint=$FIRST_NODE:29500 -m snakeddp.train --launcher torchrun ...

srun inside a Slurm allocation (2 nodes x 2 tasks)::

    srun --nodes=2 --ntasks-per-node=2 python -m snakeddp.train --launcher srun ...

mpirun (OpenMPI; no mpi4py needed)::

    mpirun -np 4 --map-by ppr:2:node -x MASTER_ADDR -x MASTER_PORT python -m snakeddp.train --launcher mpirun ...

``python -m snakeddp.launch`` builds these commands from the run config; the Snakemake
workflow calls it. A run directory's ``last.ckpt`` is resumed when it was made from the same
config, data and environment. Exit codes: 0 done, 75 preempted (last.ckpt saved; rerun to go on),
1 a snakeddp error (one line with its HINT, from rank 0 or, under the launcher, from the launcher).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from snakeddp import cluster
from snakeddp.cluster.lifecycle import PREEMPTED_EXIT_CODE, die_with_parent
from snakeddp.config.targets import user_code
from snakeddp.data import custom
from snakeddp.errors import LaunchError, exit_code
from snakeddp.provenance import record as provenance
from snakeddp.run import variables as run_variables
from snakeddp.run.attempt import (
    attempt_id,
    attempt_key,
    hold_attempt_lock,
    keep_record,
    mark,
    no_lock_warning,
    resume_checkpoint,
)
from snakeddp.run.runfile import RunFile
from snakeddp.training.callbacks import Preempted, utc_now
from snakeddp.training.models import build_model
from snakeddp.training.trackers import Trackers
from snakeddp.training.trainer import Callbacks, accelerator_and_backend, build_trainer
from snakeddp.util.hashing import sha256_file, sha256_json
from snakeddp.util.shutdown import freeze_imports

# Batches are gathered in-process from memory-mapped partitions; worker processes would only add copies.
warnings.filterwarnings("ignore", message=".*does not have many workers.*")
# Deprecations inside Lightning 2.6's own calls into torch 2.13: nothing a user can act on.
warnings.filterwarnings("ignore", message=".*all_gather is deprecated.*")
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
# Lightning says this whenever srun exists (every login node); snakeddp checks the launcher itself.
warnings.filterwarnings("ignore", message=".*The `srun` command is available on your system but is not used.*")
logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
    lambda record: not str(record.msg).startswith("💡 Tip")
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config", required=True, type=Path, help="run.yaml written by the workflow (or a config file without a sweep)"
    )
    parser.add_argument(
        "--run-dir", required=True, type=Path, help="where checkpoints, metrics.csv and provenance.json go"
    )
    parser.add_argument("--data", required=True, type=Path, help="the dataset's manifest.json")
    parser.add_argument(
        "--launcher", choices=sorted(cluster.BY_NAME), help="what started this process (default: detect)"
    )
    parser.add_argument("--environment-record", type=Path, help="results/envs/<stage>.json of the environment in use")
    parser.add_argument(
        "--failure-file",
        type=Path,
        help="where a rank stopping on a snakeddp error writes its one line instead of printing it "
        "(set by snakeddp.launch, which prints it once)",
    )
    return parser.parse_args(argv)


def report_errors(argv: Sequence[str] | None = None) -> int:
    """``main``, with a snakeddp error ending as one line: in --failure-file, else printed by rank 0 only."""
    args = parse_args(argv)
    return exit_code("snakeddp.train", lambda: main(args), speak=_rank(os.environ) == 0, failure_file=args.failure_file)


def _rank(env: Mapping[str, str]) -> int:
    try:
        return cluster.detect(env).layout(env).rank
    except LaunchError:
        return 0


def main(args: argparse.Namespace) -> int:
    main_at = time.perf_counter()
    die_with_parent()
    run = RunFile.load(args.config)
    cfg, launch = run.config, run.config["launch"]
    launcher, layout = cluster.resolve(args.launcher, os.environ, devices=launch["devices"])
    layout.check_matches(launch["nodes"], launch["devices"])
    torch.set_num_threads(launch["threads_per_process"])

    manifest_sha256 = sha256_file(args.data)
    key = attempt_key(cfg, args.data, args.environment_record)
    locked = hold_attempt_lock(args.run_dir) is not None  # a raw fd: the lock lasts as long as this process
    resume_from = resume_checkpoint(args.run_dir, key)
    if layout.is_main:
        mark(args.run_dir, key)

    pl.seed_everything(cfg["seed"], workers=True, verbose=False)
    data = custom.build_datamodule(cfg, args.data)
    model = build_model(cfg["model"], custom.task_of(data))
    trackers = Trackers(run_variables.tracking(os.environ), run.run_id, args.run_dir, layout.is_main, os.environ)
    checked_at = time.perf_counter()
    trainer, callbacks = build_trainer(
        cfg, launcher, layout, args.run_dir, trackers.loggers, trackers.callbacks, custom.shards_itself(data)
    )
    callbacks.phases.marks.update(main=main_at, checked=checked_at, trainer_built=time.perf_counter())
    trackers.log_config(cfg)

    started, clock = utc_now(), time.perf_counter()
    try:
        trainer.fit(model, datamodule=data, ckpt_path=resume_from, weights_only=True)
    except Preempted:
        if not callbacks.preemption.preempted:
            raise
        if layout.is_main:
            print(
                f"snakeddp: preempted in epoch {trainer.current_epoch}; saved {callbacks.preemption.last_path}; "
                "rerun to resume",
                flush=True,
            )
        return PREEMPTED_EXIT_CODE
    if trainer.is_global_zero:
        record = _record(
            run,
            args,
            trainer,
            callbacks,
            layout,
            manifest_sha256,
            key,
            resume_from,
            started,
            time.perf_counter() - clock,
        )
        record["tracking"] = trackers.describe()
        record["user_code"] = user_code(cfg, model, data)
        record["timing"]["phases"] = callbacks.phases.record()
        if not locked:  # the launcher printed it; the record keeps it with the run
            record["warnings"] = [no_lock_warning(args.run_dir)]
        path = provenance.write(args.run_dir, record)
        keep_record(args.run_dir)
        trackers.finish(path, callbacks.checkpoint.best_model_path)
        epochs = record["training"]["epochs_completed"]
        print(f"snakeddp: run {run.run_id} {record['status']} after {epochs} epochs; wrote {path}", flush=True)
    return 0


def _record(
    run: RunFile,
    args: argparse.Namespace,
    trainer: pl.Trainer,
    callbacks: Callbacks,
    layout: cluster.Layout,
    manifest_sha256: str,
    key: str,
    resume_from: Path | None,
    started: str,
    seconds: float,
) -> dict[str, Any]:
    """Everything provenance.json says, from the objects that did the work."""
    cfg = run.config
    # The file, not the callback's memory: an attempt that resumes at max_epochs trains no epoch.
    rows = callbacks.metrics.read()
    checkpoint = callbacks.checkpoint
    stopper = callbacks.early_stopping
    train_seconds = sum(float(r["train_seconds"]) for r in rows)
    samples = sum(int(r["samples"]) for r in rows)
    accelerator, backend = accelerator_and_backend(cfg["launch"]["accelerator"])
    ranks = callbacks.hosts.ranks
    best = provenance.file_record(checkpoint.best_model_path, args.run_dir)
    if best is not None:
        best.update(metric="val_loss", score=float(checkpoint.best_model_score))
    val_losses = [float(r["val_loss"]) for r in rows if r.get("val_loss") not in (None, "")]
    best_row = min(
        (r for r in rows if r.get("val_loss") not in (None, "")), key=lambda r: float(r["val_loss"]), default=None
    )
    return {
        "run_id": run.run_id,
        "sweep_point": run.point,
        "status": "early_stopped" if stopper is not None and stopper.stopped_epoch > 0 else "completed",
        "config": cfg,
        "config_sha256": sha256_json(cfg),
        "origin_sha256": key,
        "attempt": {"id": attempt_id(key), "restored": False},
        "code": provenance.code_info(),
        "data": custom.describe(trainer.datamodule, args.data, manifest_sha256),
        "environment": provenance.environment_info(args.environment_record),
        "launch": {
            "launcher": layout.launcher,
            "strategy": cfg["trainer"]["strategy"],
            "backend": backend,
            "accelerator": accelerator,
            "nodes": layout.num_nodes,
            "processes_per_node": layout.local_world_size,
            "world_size": trainer.world_size,
            "master_addr": layout.master_addr,
            "master_port": layout.master_port,
            "job_id": layout.job_id,
            "ranks": ranks,
            "hosts": sorted({r["host"] for r in ranks}),
            "nodes_seen": sorted({r["node"] or r["host"] for r in ranks}),
            "command": os.environ.get(run_variables.LAUNCH_COMMAND),
            "variables": provenance.cluster_variables(),
            "user": provenance.user(),
        },
        "timing": {
            "started_at": started,
            "finished_at": utc_now(),
            "duration_s": round(seconds, 3),
            "train_seconds": round(train_seconds, 3),
            "samples_trained": samples,
            "samples_per_s": round(samples / train_seconds, 3) if train_seconds else None,
        },
        "training": {
            "epochs_completed": len(rows),
            "max_epochs": cfg["trainer"]["max_epochs"],
            "stopped_early": bool(stopper is not None and stopper.stopped_epoch > 0),
            "resumed_from": provenance.file_record(resume_from, args.run_dir) if resume_from else None,
            "partitions_per_epoch": [int(r["partition"]) for r in rows if r["partition"] not in (None, "")],
            "best_checkpoint": best,
            "last_checkpoint": provenance.file_record(checkpoint.last_model_path, args.run_dir),
            "checkpoints": provenance.checkpoint_records(args.run_dir),
            "best_val_loss": min(val_losses) if val_losses else None,
            "best_val_acc": float(best_row["val_acc"])
            if best_row and best_row.get("val_acc") not in (None, "")
            else None,
            "best_epoch": int(best_row["epoch"]) if best_row else None,
        },
    }


if __name__ == "__main__":
    freeze_imports()  # torch and Lightning: 1.2 s less at every rank's exit (snakeddp.util.shutdown)
    raise SystemExit(report_errors())
