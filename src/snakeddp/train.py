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
1 a snakeddp error (one line with its HINT, from rank 0 or, under the launcher, from the launcher; where
the machine refused the ranks, its build, GPU, MIG or precision, the launcher exits 78 and no retry follows).
"""

from __future__ import annotations

if __name__ == "__main__":  # a rank started cold: torch and Lightning import with the collector paused
    from snakeddp.util.shutdown import pause_collection

    pause_collection()  # until freeze_imports below (snakeddp.util.shutdown)

import argparse
import logging
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What a rank resolves its place in the run with: none of it imports torch, so that a rank that cannot
# resolve it is refused before torch's seconds of imports.
from snakeddp import cluster
from snakeddp.cluster.base import Layout
from snakeddp.cluster.lifecycle import die_with_parent
from snakeddp.config import parts
from snakeddp.config.targets import defining_files
from snakeddp.errors import DataIntegrityError, LaunchError, exit_code
from snakeddp.run.layout import RunPaths
from snakeddp.run.runfile import RunFile
from snakeddp.util.userfiles import innermost, shown_frame, where_raised

PROG = "snakeddp.train"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {PROG}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config", required=True, type=Path, help="run.yaml written by the workflow (or a config file without a sweep)"
    )
    parser.add_argument(
        "--run-dir", required=True, type=Path, help="where checkpoints, metrics.csv and provenance.json go"
    )
    parser.add_argument("--data", required=True, type=Path, help="the dataset's manifest.json")
    parser.add_argument(
        "--launcher", choices=sorted(cluster.by_name()), help="what started this process (default: detect)"
    )
    parser.add_argument("--environment-record", type=Path, help="results/envs/<stage>.json of the environment in use")
    parser.add_argument(
        "--failure-file",
        type=Path,
        help="where a rank stopping on a snakeddp error writes its one line instead of printing it "
        "(set by snakeddp.launch, which prints it once)",
    )
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Ranks:
    """This process's place in the run: its launcher and layout, checked against the run config."""

    run: RunFile
    launch: parts.Launch
    launcher: cluster.Launcher
    layout: Layout


def resolve(args: argparse.Namespace) -> Ranks:
    """The run config and this process's checked layout; a LaunchError where the launcher's variables are
    missing or its processes are not the layout the run config asks for, a DataIntegrityError where --data
    names no file."""
    run = RunFile.load(args.config)
    launch = parts.Launch.of(run.config["launch"])
    launcher, layout = cluster.resolve(args.launcher, os.environ, devices=launch.devices)
    layout.check_matches(launch.nodes, launch.devices, ranks_only=launcher.places_ranks)
    if not args.data.is_file():
        raise DataIntegrityError(
            f"{args.data}: no such dataset manifest. HINT: pass --data the manifest the workflow wrote "
            "(results/data/<dataset>/manifest-<P>.json: `snakemake --profile local` makes it), or let the "
            "workflow start the run."
        )
    return Ranks(run, launch, launcher, layout)


def reported(args: argparse.Namespace, work: Callable[[], int], peers_said: bool = True) -> int:
    """``work``, with a snakeddp error ending as one line: in --failure-file, else printed by rank 0 only; an
    exception the user's own code raised (a model's training_step, a DataModule's setup) ends as one line too,
    naming where, its traceback (a hundred lines of runpy's, Lightning's and torch's frames) kept beside it, and so
    does a collective that failed on a gone peer (``peers_said``; Spark's rank leaves that to its driver)."""
    refused = RunPaths(args.run_dir).refused if args.failure_file else None
    return exit_code(
        PROG,
        work,
        speak=_rank(os.environ) == 0,
        failure_file=args.failure_file,
        refused_file=refused,
        explain=lambda error: users_error(error, args.failure_file, _configured_files(args.config)),
        lost_peers=peers_said,
    )


def _configured_files(run_yaml: Path) -> dict[Path, str]:
    """targets.defining_files of the run's config; none where run.yaml cannot be read (it explains a failure)."""
    try:
        return defining_files(RunFile.load(run_yaml).config)
    except Exception:
        return {}


# What to do about an error raised in an installed package's class that a key names.
_INSTALLED_HINTS = {
    "model.target": "a model trains on the data section's batches, a (features, labels) pair of tensors from a "
    "table or synthetic data (docs/customising.md): train a model written for them, or set data.module to the "
    "DataModule this one was written for, and rerun.",
    "data.module": "check data.module_kwargs against its constructor's documentation, and rerun.",
}


def users_error(
    error: Exception, failure_file: Path | None, configured: Mapping[Path, str] | None = None
) -> str | None:
    """The line for an exception raised in the user's code (where_raised: not snakeddp's, an installed package's
    or the standard library's), or in an installed package's class that the config names (``configured``:
    targets.defining_files, e.g. Lightning's BoringModel as model.target); None for any other, whose traceback is
    shown as it is (a bug of ours)."""
    kept = f" (the whole traceback: {failure_file.with_suffix('.traceback')})" if failure_file is not None else ""
    said = " ".join(str(error).split())
    said = f"{type(error).__name__}: {said if len(said) <= 300 else f'{said[:297]}...'}"
    place = where_raised(error)
    if place is not None:
        return (
            f"{said}, raised at {place}, in your code{kept}. HINT: fix it there and rerun: the run resumes from its "
            "last checkpoint."
        )
    configured = configured or {}
    frame = innermost(error, lambda name: Path(name).resolve() in configured)
    if frame is None:
        return None
    key = configured[Path(frame.filename).resolve()]
    return f"{said}, raised at {shown_frame(frame)}, in the class {key} names{kept}. HINT: {_INSTALLED_HINTS[key]}"


def _rank(env: Mapping[str, str]) -> int:
    try:
        return cluster.detect(env).layout(env).rank
    except LaunchError:
        return 0


def entered(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Ranks]:
    """The arguments and this process's place in the run; a process that cannot resolve it says so in
    one line (its rank 0) and exits here."""
    args = parse_args(argv)
    die_with_parent()  # from here on: a launcher killed while its ranks import leaves none behind
    resolved: list[Ranks] = []
    status = reported(args, lambda: resolved.append(resolve(args)) or 0)
    if not resolved:
        raise SystemExit(status)
    return args, resolved[0]


if __name__ == "__main__":
    # Before torch and Lightning: a rank of a misconfigured srun or mpirun is refused at once, not after
    # seconds of imports (more where N ranks import at once on the same cores).
    ARGS, RANKS = entered(None)

# Before Lightning: torchmetrics without transformers and matplotlib, which its import would pull in (issue 72).
import snakeddp.training.lean_torchmetrics  # noqa: F401

# isort: split
import lightning.pytorch as pl
import torch

from snakeddp import platforms
from snakeddp.cluster import pace
from snakeddp.cluster.hang import HangTimeout
from snakeddp.cluster.lifecycle import PREEMPTED_EXIT_CODE
from snakeddp.config.targets import user_code
from snakeddp.data import custom
from snakeddp.data.module import PartitionDataModule
from snakeddp.provenance import record as provenance
from snakeddp.run import variables as run_variables
from snakeddp.run.attempt import attempt_key, hold_attempt_lock, keep_record, mark, resume_checkpoint
from snakeddp.run.tries import write_hang
from snakeddp.training.callbacks import Preempted
from snakeddp.training.meeting import MeetingError, meet
from snakeddp.training.models import best_confusion, build_model
from snakeddp.training.safe_load import check_fits
from snakeddp.training.trackers import Trackers
from snakeddp.training.trainer import build_trainer
from snakeddp.training.watch import Watch
from snakeddp.util.hashing import sha256_file
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


def report_errors(argv: Sequence[str] | None = None) -> int:
    """``main`` on ``argv`` (Spark's rank), with a snakeddp error ending as one line as ``reported`` says; a gone
    peer's error is the rank's to handle (its driver names the lost executor)."""
    args, ranks = entered(argv)
    return reported(args, lambda: main(args, ranks), peers_said=False)


def model_for(
    model_cfg: Mapping[str, Any], data: pl.LightningDataModule, resume_from: Path | None
) -> pl.LightningModule:
    """The run's model, sized for its data; the checkpoint it resumes read weights-only (a crafted or damaged one is
    refused before any strategy's loader sees it: training.safe_load) and its weights checked against the model,
    in one read."""
    model = build_model(model_cfg, custom.task_of(data))
    if resume_from is not None:
        check_fits(resume_from, model)
    return model


def main(args: argparse.Namespace, ranks: Ranks) -> int:
    main_at = time.perf_counter()
    run, launch, launcher, layout = ranks.run, ranks.launch, ranks.launcher, ranks.layout
    cfg = run.config
    trainer_cfg = parts.Trainer.of(cfg["trainer"])
    torch.set_num_threads(launch.threads_per_process)
    timeout = HangTimeout(launch.hang_timeout)
    os.environ.update(timeout.rank_env(os.environ))  # NCCL reads them when Lightning starts the process group
    # Before any model is built: TF32 (high) or bf16 (medium) inside fp32 matmuls changes what a run computes.
    torch.set_float32_matmul_precision(trainer_cfg.matmul_precision)
    attempt = begin(run, args, layout.is_main)

    pl.seed_everything(cfg["seed"], workers=True, verbose=False)
    data = custom.build_datamodule(parts.Data.of(cfg["data"]), trainer_cfg, cfg["seed"], args.data)
    model = model_for(cfg["model"], data, attempt.resume_from)
    trackers = Trackers(run_variables.tracking(os.environ), run.run_id, args.run_dir, layout.is_main, os.environ)
    checked_at = time.perf_counter()
    trainer, callbacks = build_trainer(
        trainer_cfg,
        launch,
        launcher,
        layout,
        args.run_dir,
        trackers.loggers,
        trackers.callbacks,
        custom.shards_itself(data),
    )
    callbacks.phases.marks.update(main=main_at, checked=checked_at, trainer_built=time.perf_counter())
    saving = callbacks.phases.checkpoints.is_saving
    watch = watch_over(trainer, launcher, layout, timeout, run.run_id, args, saving, pace.Straggler.of(launch))
    callbacks.phases.marks.update(met=time.perf_counter())
    trackers.log_config(cfg)

    started, clock = provenance.utc_now(), time.perf_counter()
    callbacks.live.fit_called(data)  # the try's account: the DataModule's setup is data loading
    try:
        trainer.fit(model, datamodule=data, ckpt_path=attempt.resume_from, weights_only=True)
        if watch is not None:
            watch.stop(finished=True)
    except Preempted:
        if not callbacks.preemption.preempted:
            raise
        if layout.is_main:
            print(
                # Counted from 1, as the progress lines count (Lightning's current_epoch counts from 0).
                f"snakeddp: preempted in epoch {trainer.current_epoch + 1}/{trainer.max_epochs}; "
                f"saved {callbacks.preemption.last_path}. HINT: rerun to resume from it, as a retry of the job "
                "does (where snakemake itself was killed too, `snakemake --unlock` first)",
                flush=True,
            )
        return PREEMPTED_EXIT_CODE
    finally:
        if watch is not None:
            watch.stop(finished=False)
    if trainer.is_global_zero:
        record = provenance.build(
            attempt,
            layout,
            callbacks.outcome(trainer, started, time.perf_counter() - clock),
            data=described(data, attempt),
            user_code=user_code(cfg, model, data),
            tracking=trackers.describe(),
        )
        confusion = best_confusion(model, record["training"]["best_epoch"])
        if confusion is not None:
            record["training"]["confusion"] = confusion
        pace.into_ranks(record["launch"]["ranks"], watch.scores() if watch is not None else {})
        path = provenance.write(args.run_dir, record)
        # The attempt is finished (keep_record) once the trackers have what it promised them: a rerun
        # after a failed upload or registration resumes it and sends them again, instead of restoring it.
        registered = trackers.finish(path, callbacks.checkpoint.best_model_path)
        keep_record(args.run_dir)
        epochs = record["training"]["epochs_completed"]
        counted = f"{epochs} epoch{'' if epochs == 1 else 's'}"
        print(f"snakeddp: run {run.run_id} {record['status']} after {counted}; wrote {path}", flush=True)
        if registered:
            print(f"snakeddp: registered its best model as {registered['name']} version {registered['version']}")
    end_process_group()
    return 0


def end_process_group() -> None:
    """End the run's process group while Python is alive, as torch documents (Lightning does it for NCCL only, at
    exit): its gloo threads are joined here. One left running can drop the last reference to a tensor Python made (a
    synced metric's all_reduce, a checkpoint path's broadcast) as a rank started cold finalizes, and taking the GIL
    then ends the thread through a noexcept destructor: "terminate called without an active exception", exit -6
    (pytorch/pytorch#190489). Only after a finished fit, when every rank is done with the group's collectives: after
    a failure a peer may still be in one, which ending the group would wait for."""
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def described(data: pl.LightningDataModule, attempt: provenance.Attempt) -> dict[str, Any]:
    """Provenance's data: a run that started beside its ingestion (snakeddp.data.stream) records the dataset's
    manifest, taken once every partition is published, not the stream manifest it started on."""
    completed = data.completed() if isinstance(data, PartitionDataModule) else None
    manifest, manifest_sha256 = completed or (attempt.manifest, attempt.manifest_sha256)
    return custom.describe(data, manifest, manifest_sha256)


def watch_over(
    trainer: pl.Trainer,
    launcher: cluster.Launcher,
    layout: Layout,
    timeout: HangTimeout,
    run_id: str,
    args: argparse.Namespace,
    saving: Callable[[], bool],
    straggler: pace.Straggler,
) -> Watch | None:
    """Meet the other ranks, then watch the run's progress (snakeddp.training.meeting, .watch); None for one
    process, without launch.hang_timeout, or where Lightning starts the processes itself (inside fit)."""
    environment = trainer.strategy.cluster_environment
    if not timeout.on or layout.world_size == 1 or environment is None:
        return None
    if not environment.creates_processes_externally:
        return None
    node = platforms.scheduler_node(os.environ)
    try:
        meeting = meet(
            layout,
            environment.main_address,
            environment.main_port,
            timeout,
            run_id,
            node,
            node_of=lambda rank: launcher.node_of(rank, layout, os.environ),  # asked only of ranks that never came
        )
    except MeetingError as error:
        write_hang(args.run_dir, error.record)
        raise
    watch = Watch(meeting, layout, timeout, trainer, run_id, args.run_dir, args.failure_file, node, saving, straggler)
    watch.start()
    return watch


def begin(run: RunFile, args: argparse.Namespace, is_main: bool) -> provenance.Attempt:
    """Hold the run directory's lock and find the checkpoint this attempt resumes, if it was made from
    the same attempt key; rank 0 records the key of a run started without the launcher."""
    manifest_sha256 = sha256_file(args.data)
    key = attempt_key(run.config, args.data, args.environment_record)
    locked = hold_attempt_lock(args.run_dir) is not None  # a raw fd: the lock lasts as long as this process
    resume_from = resume_checkpoint(args.run_dir, key)  # read weights-only by model_for, before any strategy's loader
    if is_main:
        mark(args.run_dir, key)
    return provenance.Attempt(
        run=run,
        run_dir=args.run_dir,
        manifest=args.data,
        manifest_sha256=manifest_sha256,
        environment_record=args.environment_record,
        key=key,
        resume_from=resume_from,
        locked=locked,
        resumed_record=provenance.file_record(resume_from, args.run_dir) if is_main and resume_from else None,
    )


if __name__ == "__main__":
    freeze_imports()  # torch and Lightning: 1.2 s less at every rank's exit (snakeddp.util.shutdown)
    raise SystemExit(reported(ARGS, lambda: main(ARGS, RANKS)))
