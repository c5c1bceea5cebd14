"""Start every training process of one run, the way its platform wants them started.

    python -m snakeddp.launch --platform local --config results/runs/base/run.yaml \\
        --run-dir results/runs/base --data results/data/<dataset>/manifest.json

This is the one place that builds launch commands (torchrun, srun, mpirun). Before any rank
starts it decides, once, whether the run resumes: checkpoints of a different config, data or
environment are moved to ``superseded/``. The command is logged shell-quoted, recorded in
provenance, and preemption signals are passed on to the ranks.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import psutil

from snakeddp import cluster
from snakeddp.cluster import network
from snakeddp.cluster.base import quote
from snakeddp.cluster.lifecycle import PREEMPTED_EXIT_CODE
from snakeddp.hashing import sha256_file
from snakeddp.provenance.record import environment_hash
from snakeddp.run import attempt
from snakeddp.run.runfile import RunFile

PLATFORMS = ("local", "slurm", "azureml")
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.launch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--platform",
        choices=PLATFORMS,
        default=os.environ.get("SNAKEDDP_PLATFORM", "local"),
        help="where the processes start (default: $SNAKEDDP_PLATFORM, set by the workflow, else local)",
    )
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--environment-record", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    return parser.parse_args(argv)


def train_arguments(args: argparse.Namespace, launcher: str) -> tuple[str, ...]:
    entry = [
        "--config",
        str(args.config),
        "--run-dir",
        str(args.run_dir),
        "--data",
        str(args.data),
        "--launcher",
        launcher,
    ]
    if args.environment_record:
        entry += ["--environment-record", str(args.environment_record)]
    return tuple(entry)


def build(args: argparse.Namespace, env: dict[str, str]) -> tuple[cluster.Launcher, list[str], dict[str, str]]:
    """The launcher, the argv that starts every rank, and the environment to start it with."""
    run = RunFile.load(args.config)
    launch = run.config["launch"]
    launcher = cluster.for_platform(launch["launcher"], args.platform)
    plan = cluster.LaunchPlan(
        nodes=launch["nodes"],
        devices=launch["devices"],
        threads_per_process=launch["threads_per_process"],
        master_port=launch["master_port"],
        python=sys.executable,
        entry=train_arguments(args, launcher.name),
        gpus=launch["accelerator"] == "gpu",
        # NCCL/gloo tuning (network.env, or exported by the user) must reach every rank.
        extra_env=network.forwarded(env),
    )
    argv, exports = launcher.command(plan, env)
    threads = str(launch["threads_per_process"])
    child_env = {
        **env,
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        **exports,
        "SNAKEDDP_LAUNCH_COMMAND": quote(argv),
        "SNAKEDDP_PLATFORM": args.platform,
    }
    return launcher, argv, child_env


def run_attempt(args: argparse.Namespace) -> int:
    run = RunFile.load(args.config)
    key = attempt.resume_key(run.config, sha256_file(args.data), environment_hash(args.environment_record))
    launcher, argv, env = build(args, dict(os.environ))
    if args.dry_run:
        print(quote(argv))
        return 0
    resume = attempt.prepare(args.run_dir, key)
    print(
        f"snakeddp.launch: run {run.run_id} on {args.platform} via {launcher.name}"
        f"{f', resuming from {resume}' if resume else ''}\n  {quote(argv)}",
        flush=True,
    )
    child = subprocess.Popen(argv, env=env)
    preempted = False

    def forward(signum: int, frame: object) -> None:
        nonlocal preempted
        preempted = preempted or signum in PREEMPT_SIGNALS
        for target in signal_targets(child, launcher.name, signum):
            target.send_signal(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    code = child.wait()
    # The ranks exit 75 after saving last.ckpt; torchrun reports any failing worker as 1.
    return PREEMPTED_EXIT_CODE if preempted and code != 0 else code


def signal_targets(child: subprocess.Popen, launcher: str, signum: int) -> list[psutil.Process]:
    """Who gets a signal the launcher received.

    srun and mpirun pass signals on to every rank. torchrun's agent does not: it dies on USR1,
    and on TERM it kills its workers if they take more than 30 s to stop, which a rank saving
    a checkpoint on a busy node can exceed. So preemption signals go to torchrun's workers
    directly; they stop together, save last.ckpt and exit, and torchrun follows.
    """
    parent = psutil.Process(child.pid)
    if launcher == "torchrun" and signum in PREEMPT_SIGNALS:
        return parent.children(recursive=True) or [parent]
    return [parent]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.platform == "azureml":
        from snakeddp.azureml.submit import main as submit  # optional extra, imported only here

        return submit(args)
    return run_attempt(args)


if __name__ == "__main__":
    raise SystemExit(main())
