"""Start every training process of one run, the way its platform wants them started.

    python -m snakeddp.launch --platform local --config results/runs/base/run.yaml \\
        --run-dir results/runs/base --data results/data/<dataset>/manifest.json

This is the one place that builds launch commands (snakeddp's supervisor, torchrun, srun,
mpirun). Before any rank starts it decides, once, whether the run resumes, is restored (this
attempt key already finished: nothing trains), continues a finished attempt of a shorter budget
(``provenance.lineage``) or starts fresh; an attempt of another key moves to ``attempts/``.
The command is logged shell-quoted, recorded in provenance, and preemption signals are passed
on to the ranks.
"""

from __future__ import annotations

if __name__ == "__main__":  # a job of the workflow: its warm process runs it, where there is one
    import signal as _signal

    from snakeddp.util import relays as _relays

    # Before anything else: a stop while this process imports (a closed terminal, a scheduler) is noted for
    # run_attempt, which stops the attempt as preempted, rather than ending it before any rank or record exists.
    # The stops run_attempt's handlers take (snakeddp.cluster.lifecycle.FORWARDED, which imports more).
    _relays.hold((_signal.SIGTERM, _signal.SIGINT, _signal.SIGUSR1, _signal.SIGUSR2))
    from snakeddp.util.handoff import hand_off

    hand_off(__spec__.name)

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import psutil

from snakeddp import cluster, platforms
from snakeddp.cluster import network
from snakeddp.cluster.base import quote
from snakeddp.cluster.hang import HangTimeout
from snakeddp.cluster.lifecycle import FORWARDED, PREEMPTED_EXIT_CODE
from snakeddp.config import site
from snakeddp.config.parts import Launch
from snakeddp.contract import RemotePlatform
from snakeddp.errors import REFUSED_EXIT_CODE, NoSpaceError, exit_code
from snakeddp.provenance import lineage
from snakeddp.run import account, attempt, ledger, status, tries, variables
from snakeddp.run.layout import RunPaths
from snakeddp.run.runfile import RunFile
from snakeddp.util import handoff, relays, threads
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.terminal import say

PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.launch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--platform",
        choices=list(platforms.names()),
        default=variables.platform(os.environ),
        help="where the processes start (default: $SNAKEDDP_PLATFORM, set by the workflow, else local)",
    )
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--environment-record", type=Path)
    parser.add_argument(
        "--record-to",
        type=Path,
        help="move the finished attempt's provenance.json here instead of leaving it in the run directory "
        "(a search rung's record: the run directory's provenance.json means the run's whole budget)",
    )
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
    return (*entry, "--failure-file", str(RunPaths(args.run_dir).failure))


def build(args: argparse.Namespace, env: dict[str, str]) -> tuple[cluster.Launcher, list[str], dict[str, str]]:
    """The launcher, the argv that starts every rank, and the environment to start it with."""
    run = RunFile.load(args.config)
    launch = Launch.of(run.config["launch"])
    launcher = cluster.for_platform(launch.launcher, args.platform)
    # auto decided once, as the workflow planned it (a cluster's site, this machine's GPUs), and handed
    # to every rank: a run sized for GPUs never trains on a CPU because a rank saw none.
    accelerator = variables.accelerator(launch, env)
    plan = cluster.LaunchPlan(
        nodes=launch.nodes,
        devices=launch.devices,
        threads_per_process=launch.threads_per_process,
        master_port=launch.master_port,
        python=sys.executable,
        entry=train_arguments(args, launcher.name),
        gpus=accelerator == "gpu",
        # NCCL/gloo tuning (network.env, or exported by the user) must reach every rank.
        extra_env=network.forwarded(env),
        cpus_per_process=site.cpus_per_process(launch, accelerator, variables.site(env)),
        join_timeout_s=HangTimeout(launch.hang_timeout).join_timeout_s(),
    )
    argv, exports = launcher.command(plan, env)
    threads = str(launch.threads_per_process)
    child_env = {
        **env,
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        **exports,
        variables.LAUNCH_COMMAND: quote(argv),
        variables.JOB_START: "warm" if handoff.served else "cold",
        variables.PLATFORM: args.platform,
        variables.ACCELERATOR: accelerator,
        # The devices its platform gives this job's ranks (the local platform: GPUs no other run holds).
        **platforms.load(args.platform).devices_for(launch.devices, accelerator, env),
    }
    return launcher, argv, child_env


def publish_elsewhere(provenance: Path, record: Path) -> None:
    """Move a finished attempt's record out of its run directory, where Snakemake would take it for the
    train rule's output (the run trained to its whole budget); the attempt keeps its own copy."""
    record.parent.mkdir(parents=True, exist_ok=True)
    provenance.replace(record)


def record_from_longer(args: argparse.Namespace) -> bool:
    """A search rung's run that a longer finished attempt already trained past the rung's budget: its
    record is written from that attempt's first epochs and nothing trains (lineage.longer); False
    when there is none, or when this very budget finished (then it is restored as usual)."""
    run = RunFile.load(args.config)
    identity = attempt.Identity.of(run.config, args.data, args.environment_record)
    origin = None if attempt.restorable(args.run_dir, identity.key) else lineage.longer(args.run_dir, identity)
    if origin is None:
        return False
    atomic_write_json(args.record_to, lineage.truncated(origin, identity, run))
    theirs = origin.record["training"]["max_epochs"]
    say(
        f"{run.run_id}: scored the first {identity.budget} epochs of attempt {origin.attempt_id} "
        f"(max_epochs {theirs}) for this rung, nothing trained"
    )
    return True


def run_attempt(args: argparse.Namespace) -> int:
    run = RunFile.load(args.config)
    identity = attempt.Identity.of(run.config, args.data, args.environment_record)
    launcher, argv, env = build(args, dict(os.environ))
    if args.dry_run:
        print(quote(argv))
        return 0
    # Handlers first: a preemption signal before the ranks exist must not take the default
    # action (death, for SIGUSR1), but stop the attempt the way a preempted one stops. A closed
    # terminal's SIGHUP too, as the SIGTERM that Snakemake's process relays for it (snakeddp.util.relays).
    received: list[int] = []
    got: list[int] = []  # as they came: the line names a closed terminal's SIGHUP, not the SIGTERM it stands for
    child: subprocess.Popen | None = None

    def forward(signum: int, frame: object) -> None:
        got.append(signum)
        stop = relays.stop_for(signum)
        received.append(stop)
        if child is not None:
            deliver(child, launcher.name, stop)

    held = take_stops(forward)
    start = lineage.prepare(args.run_dir, identity, run)
    resume = start.resume
    if attempt.finished(args.run_dir):
        # On the terminal too (local platform): the train job restored, it did not train.
        say(f"{run.run_id}: {lineage.restore(args.run_dir, identity.key)}")
        return 0
    if start.origin is not None:
        say(f"{run.run_id}: {start.origin.continuing(run.run_id, identity.budget)}")
    gpus = (
        f", GPUs {env['CUDA_VISIBLE_DEVICES']}"
        if env.get(variables.ACCELERATOR) == "gpu" and "CUDA_VISIBLE_DEVICES" in env
        else ""
    )
    print(
        f"snakeddp.launch: run {run.run_id} on {args.platform} via {launcher.name}{gpus}"
        f"{f', resuming from {resume}' if resume else ''}\n  {quote(argv)}",
        flush=True,
    )
    failed, refused = RunPaths(args.run_dir).failure, RunPaths(args.run_dir).refused
    failed.unlink(missing_ok=True)
    failed.with_suffix(".traceback").unlink(missing_ok=True)  # a full disk's, kept beside its line (errors.py)
    refused.unlink(missing_ok=True)
    RunPaths(args.run_dir).hung.unlink(missing_ok=True)
    resumed_from = tries.saved(args.run_dir) if resume else None
    began = time.time()
    env[variables.TRY_STARTED] = f"{began:.3f}"
    account.starting(args.run_dir, platforms.load(args.platform).where_tried(env), resumed_from)  # their GPUs
    if received:
        print(f"snakeddp.launch: {signal.Signals(got[0]).name} before the ranks started; not starting them.")
        # Recorded as any stopped try (tries.json, status.json): preempted, to resume, or interrupted by Ctrl-C.
        code = PREEMPTED_EXIT_CODE if any(signum in PREEMPT_SIGNALS for signum in received) else 128 + received[0]
        record_try(args, launcher.name, began, code, received, resumed_from)
    else:
        started = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, start_new_session=launcher.own_session)
        # Signals that came while it started were only recorded: pass them on now, once. Snakemake's relays
        # (a cold job's, snakeddp.util.relays) wait too: one must not come before the signal it stands for.
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
        child, missed = started, list(received)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
        for signum in missed:
            deliver(child, launcher.name, signum)
        code = followed(child, failed)
        try:
            record_try(args, launcher.name, began, code, received, resumed_from)
        except NoSpaceError:
            # The disk a rank found full has no room for the try's record either: the rank's line says it.
            if code == 0 or not failed.exists():
                raise
    preempted = any(signum in PREEMPT_SIGNALS for signum in received)
    if code != 0 and failed.exists():
        print(failed.read_text(encoding="utf-8").strip(), file=sys.stderr, flush=True)
        return REFUSED_EXIT_CODE if refused.exists() else 1
    # The ranks exit 75 after saving last.ckpt; torchrun reports any failing worker as 1.
    return PREEMPTED_EXIT_CODE if preempted and code != 0 else code


#: What the launcher acts on (take_stops): the stops it passes on, a closed terminal's SIGHUP, Snakemake's relays.
HELD = (*FORWARDED, signal.SIGHUP, *relays.RELAYED)


def take_stops(forward: Callable[[int, object], None]) -> tuple[int, ...]:
    """Make ``forward`` the handler of every stop the launcher passes on, and hand it those that came since this
    process's first line (relays.hold), in order. Returns the signals to hold while the ranks' launcher starts."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    for signum in relays.with_hangup(FORWARDED):
        signal.signal(signum, forward)
    early = relays.take_held()
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    for signum in early:
        forward(signum, None)
    return HELD


def outcome_of(code: int, received: Sequence[int], hang: Mapping[str, Any] | None) -> str:
    """How a try ended, for tries.json."""
    if hang is not None:
        return "hung"
    if code == 0:
        return "completed"
    if code == PREEMPTED_EXIT_CODE or any(signum in PREEMPT_SIGNALS for signum in received):
        return "preempted"
    return "interrupted" if received else "failed"


def record_try(
    args: argparse.Namespace,
    launcher: str,
    began: float,
    code: int,
    received: Sequence[int],
    resumed_from: Mapping[str, Any] | None,
) -> None:
    """Add this start of the ranks to the attempt's tries.json: how it ended (hung.json, where a rank found it
    hung), what it kept (last.json), and where the platform ran it."""
    hang = tries.take_hang(args.run_dir)
    where = dict(platforms.load(args.platform).where_tried(os.environ))
    where.pop(account.QUEUE_WAIT, None)  # asked when the try started (account.starting)
    ended, outcome = time.time(), outcome_of(code, received, hang)
    # Rank 0's last post of this try (account.starting reset it), read once for all the try's end says.
    posted = status.read(args.run_dir) or {}
    entry = tries.append(
        args.run_dir,
        tries.entry(
            started=began,
            ended=ended,
            outcome=outcome,
            exit_code=code,
            launcher=launcher,
            job_id=where.pop("job_id", None),
            resumed_from=resumed_from,
            saved_now=tries.saved(args.run_dir),
            hang=hang,
            posted_step=posted.get("step") if posted.get("writer") == "rank 0" else None,
            placement=where,
            account=account.of_try_here(args.run_dir, ended - began, outcome, launch_gpus(args), posted),
        ),
    )
    status.ended(args.run_dir, outcome, posted)
    ledger.record_try(args.run_dir, entry)  # a hung try's nodes, remembered after the run (results/nodes.json)


def launch_gpus(args: argparse.Namespace) -> int:
    """The GPUs a try's ranks hold, one each where they run on GPUs (its GPU-hours), as build decided."""
    launch = Launch.of(RunFile.load(args.config).config["launch"])
    return launch.nodes * launch.devices if variables.accelerator(launch, os.environ) == "gpu" else 0


#: The thread that passes the ranks' stderr on (relay_stderr).
RELAY = "snakeddp-ranks-stderr"
#: After the ranks' launcher ended, how long its stderr may take to reach its end (the last lines still in the pipe).
DRAIN_S = 10.0


def followed(child: subprocess.Popen, failed: Path, drain_s: float = DRAIN_S) -> int:
    """Wait for the ranks' launcher, its stderr passed on meanwhile (relay_stderr); its exit code. A process it
    left behind that holds the pipe (a rank's own child, orphaned) would keep its end from coming: not waited for."""
    relay = threads.start(threading.Thread(target=relay_stderr, args=(child.stderr, failed), name=RELAY, daemon=True))
    code = child.wait()
    relay.join(drain_s)
    if relay.is_alive() and child.stderr is not None:
        left = " ".join(map(str, holders(child.stderr.fileno()))) or "PID"
        print(
            f"snakeddp.launch: the ranks ended, but a process started under them still holds their stderr, and goes "
            f"on (pid {left}). HINT: `kill {left}` ends it.",
            file=sys.stderr,
            flush=True,
        )
    return code


def holders(fd: int) -> list[int]:
    """The other processes that hold the pipe behind ``fd`` (either end), as far as /proc shows this user."""
    pipe = f"pipe:[{os.fstat(fd).st_ino}]"
    found = set()
    for entry in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            if os.readlink(entry) == pipe:
                found.add(int(entry.parts[2]))
    return sorted(found - {os.getpid()})


def relay_stderr(stream: IO[bytes], failed: Path) -> None:
    """Pass the ranks' stderr on until one of them stops on a snakeddp error.

    What follows is the launcher's own account of the failure (the supervisor's line, torchrun's
    ChildFailedError report, srun's and mpirun's exit notices) and the other ranks being stopped;
    the rank's one line says it all, and the launcher prints it once when the ranks are gone.
    """
    for chunk in iter(lambda: stream.read1(1 << 16), b""):
        if not failed.exists():
            sys.stderr.buffer.write(chunk)
            sys.stderr.buffer.flush()


def deliver(child: subprocess.Popen, launcher: str, signum: int) -> None:
    """``signum`` passed on to ``child``'s (signal_targets); one that has ended needs it no more (a stop landing as
    the child exits and is reaped raised NoSuchProcess out of the signal handler, a traceback in the job's log)."""
    try:
        targets = signal_targets(child, launcher, signum)
    except psutil.NoSuchProcess:
        return
    for target in targets:
        with contextlib.suppress(psutil.NoSuchProcess):
            target.send_signal(signum)


def signal_targets(child: subprocess.Popen, launcher: str, signum: int) -> list[psutil.Process]:
    """Who gets a signal the launcher received.

    srun, mpirun and snakeddp's supervisor (direct) pass signals on to every rank. torchrun's
    agent does not: it dies on USR1, and on TERM it kills its workers if they take more than
    30 s to stop, which a rank saving a checkpoint on a busy node can exceed. So preemption
    signals go to torchrun's workers directly; they stop together, save last.ckpt and exit, and
    torchrun follows.
    """
    parent = psutil.Process(child.pid)
    if launcher == "torchrun" and signum in PREEMPT_SIGNALS:
        return parent.children(recursive=True) or [parent]
    return [parent]


def main(argv: Sequence[str] | None = None) -> int:
    """Start the run; a snakeddp error of the launcher or of any rank ends as one line and exit 1."""
    return exit_code("snakeddp.launch", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    args = parse_args(argv)
    if args.record_to and record_from_longer(args):
        return 0
    # A remote platform's train job submits the run and follows it; any other starts the ranks here.
    contract = platforms.load(args.platform)
    if isinstance(contract, RemotePlatform):
        relays.let_go()  # its job sets its own handlers where a stop cancels what it submitted
        code = contract.submit(args)
    else:
        code = run_attempt(args)
    if code == 0 and args.record_to:
        publish_elsewhere(RunPaths(args.run_dir).provenance, args.record_to)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
