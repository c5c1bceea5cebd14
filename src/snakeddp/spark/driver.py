"""A run's Spark driver: it has the run's ranks started in a Spark application, and judges the run.

    python -m snakeddp.spark.driver --num-processes=2 --threads=1 -- --config results/runs/base/run.yaml \\
        --run-dir results/runs/base --data ... --launcher torchdistributor --failure-file .../failure.txt

``snakeddp.launch`` starts it (the torchdistributor launcher) with the run's environment. It hands the
run to the workflow's shared application (``snakeddp.spark.sharing``) where there is one and it takes
the run; else it starts an application of its own (a Databricks job's driver always does): it connects
to the master (``snakeddp.spark.master``) and asks for ``num_processes`` task slots. Either way the
ranks are ``snakeddp.spark.rank``, one per barrier task: forked in its task (``snakeddp.spark.stage``, the
shared application) or under torchrun (TorchDistributor, a run's own). The ranks work in this directory
and write the run directory, so driver and executors must share its path (as Slurm's nodes do).

``TorchDistributor.run(path)`` returns None whatever torchrun exits with, so the run is judged by
its own records: ``provenance.json`` written (done), the stop request made (preempted, 75), a
rank's one line in the failure file (1), else one line of ours. A signal from snakeddp.launch is
passed to every rank through a stop file in the run directory (``rank.py`` watches it), since
the driver cannot signal processes on other machines.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from snakeddp.cluster import network
from snakeddp.cluster.lifecycle import FORWARDED, PREEMPTED_EXIT_CODE
from snakeddp.errors import exit_code
from snakeddp.run import attempt, status, variables
from snakeddp.run.layout import RunPaths
from snakeddp.run.tries import newest_checkpoint
from snakeddp.spark import PLATFORM, SparkError, settings, sharing
from snakeddp.spark import master as masters
from snakeddp.spark import session as sessions
from snakeddp.spark.jobside import APP_ID, MASTER
from snakeddp.spark.settings import Settings
from snakeddp.util import terminal, threads
from snakeddp.util.fsutil import atomic_write_json, atomic_write_text

SETTINGS_FILE = "rank-env.json"
STOP_FILE = "stop"
# How long the driver waits, after its Spark job ended, for ranks still exiting on the executors.
RANKS_GONE_S = 30.0
# Variables of the train job every rank needs; the rest of the driver's environment (PATH, HOME,
# JAVA_HOME...) belongs to this machine, not to the executors'.
RANK_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONPATH")
FAILED_STAGE = re.compile(r"Job aborted due to stage failure: (?P<reason>[^\n]*)")
EXECUTOR_LOST = re.compile(
    r"ExecutorLostFailure \(executor (?P<id>\S+) exited[^)]*\)|executor (?P<id2>\S+) \(\S+\) lost"
)


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m snakeddp.spark.driver", description=__doc__)
    parser.add_argument("--num-processes", type=int, required=True, help="the run's world size: one rank per task")
    parser.add_argument("--threads", type=int, default=1, help="cores of each rank (spark.task.cpus)")
    parser.add_argument("--gpu", action="store_true", help="TorchDistributor's use_gpu")
    args, rest = parser.parse_known_args(argv)
    entry = rest[1:] if rest[:1] == ["--"] else rest
    train = argparse.ArgumentParser(add_help=False)
    train.add_argument("--run-dir", type=Path, required=True)
    train.add_argument("--failure-file", type=Path)
    known, _ = train.parse_known_args(entry)
    args.run_dir, args.failure_file = known.run_dir, known.failure_file or RunPaths(known.run_dir).failure
    return args, entry


def rank_environment(env: Mapping[str, str], app_id: str, master: str, scratch: Path) -> dict[str, str]:
    """What every rank adds to its task's environment (rank.py reads it from the settings file)."""
    # Not the spark section: it is the driver's, and its spark.conf may hold spark.authenticate.secret,
    # which rank 0 would record with its SNAKEDDP_* variables. Nor the terminal's relay, which is on the driver's
    # machine: a rank's said lines reach it through the driver (snakeddp.spark.stage marks them so).
    ours = {
        name: value
        for name, value in env.items()
        if (name.startswith("SNAKEDDP_") or name in RANK_VARIABLES)
        and name not in (variables.PLATFORM_SECTION, variables.TERMINAL)
    }
    return {**ours, **network.forwarded(env), APP_ID: app_id, MASTER: master, "TMPDIR": str(scratch / "tmp")}


def run(args: argparse.Namespace, entry: list[str], env: Mapping[str, str]) -> int:
    section = settings.from_environment(env)
    master, source = masters.check(section, env)
    paths = RunPaths(args.run_dir)
    scratch = paths.platform(PLATFORM).resolve()
    shutil.rmtree(scratch, ignore_errors=True)
    sessions.prepare_scratch(scratch)
    stop_file = scratch / STOP_FILE
    requested: list[int] = []

    def stop(signum: int, frame: object) -> None:
        # Only a flag and a file: the ranks see it within a second and stop together at one step.
        if not requested:
            requested.append(signum)
            atomic_write_text(stop_file, signal.Signals(signum).name)

    for signum in FORWARDED:
        signal.signal(signum, stop)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' Python: this venv's
    try:
        error = shared(args, entry, env, section, scratch)
        if error is ALONE:
            error = alone(args, entry, env, section, (master, source), scratch)
        if not requested and stop_file.exists():
            requested.append(signal.SIGTERM)  # the workflow ended under the run: its application stopped it
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        wait_for_ranks(args.run_dir)
    return judge(args, paths, requested, error)


ALONE = RuntimeError("the run starts an application of its own")


def shared(
    args: argparse.Namespace, entry: list[str], env: Mapping[str, str], section: Settings, scratch: Path
) -> BaseException | None:
    """The run's ranks in the workflow's shared application (snakeddp.spark.sharing), if it has one and takes
    the run: what the Spark job ended with; ALONE where the run starts an application of its own."""
    path = env.get(sharing.VARIABLE)
    if not path:
        return ALONE
    try:
        client = sharing.Client.connect(path, sharing.hello(section, args.num_processes, args.threads, args.gpu))
    except sharing.Declined as why:
        print(f"snakeddp.spark: this run starts a Spark application of its own: {why}.", file=sys.stderr, flush=True)
        return ALONE
    try:
        app = client.application
        write_rank_settings(env, app["id"], app["master"], scratch)
        print(
            f"snakeddp.spark: application {app['id']} on {app['master']} ({app['source']}), {args.num_processes} "
            f"ranks; shared by the workflow's runs (its session started in {app['session_s']:.1f} s)",
            flush=True,
        )
        request = {
            "num_processes": args.num_processes,
            "gpu": args.gpu,
            "settings": str(scratch / SETTINGS_FILE),
            "stop_file": str(scratch / STOP_FILE),
            "entry": entry,
            "group": str(args.run_dir.resolve()),
            "failure_file": str(args.failure_file.resolve()),
        }
        said = client.train(request, terminal.passed_on, lambda why: queued(args.run_dir, why))
    finally:
        client.close()
    return None if said is None else RuntimeError(said)


def queued(run_dir: Path, why: str) -> None:
    """The run waits for the shared application's task slots: said once, and its status queued (not "starting")
    until its ranks post."""
    terminal.say(f"{run_dir.name}: waits for its turn in the workflow's Spark application: {why}")
    status.write(run_dir, "queued", writer="launcher", detail=f"waits for Spark task slots: {why}")


def alone(
    args: argparse.Namespace,
    entry: list[str],
    env: Mapping[str, str],
    section: Settings,
    where: tuple[str, str],
    scratch: Path,
) -> BaseException | None:
    """The run's own application: its session, its ranks, then the session's end."""
    master, source = where
    started = time.monotonic()
    session = own_session(args, env, section, where, scratch)
    try:
        context = session.sparkContext
        write_rank_settings(env, context.applicationId, master, scratch)
        print(
            f"snakeddp.spark: application {context.applicationId} on {master} ({source}), {args.num_processes} "
            f"ranks; session started in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        threads.start(threading.Thread(target=cancel_on_failure, args=(context, args.failure_file), daemon=True))
        return sessions.distribute(args.num_processes, args.gpu, scratch / SETTINGS_FILE, entry)
    finally:
        session.stop()


def own_session(
    args: argparse.Namespace, env: Mapping[str, str], section: Settings, where: tuple[str, str], scratch: Path
) -> Any:
    """The session of the run's own application, on the master ``where`` names; a SparkError of one line where it
    does not start. ``scratch`` is prepared (sessions.prepare_scratch: the driver's logging)."""
    master, source = where
    shape = sessions.Shape(args.run_dir.name, args.num_processes, args.threads, args.gpu)
    settings = sessions.spark_settings(shape, section, master, scratch, masters.cluster_defaults(env))
    return sessions.started(lambda: sessions.start_session(settings), scratch, master, source)


def write_rank_settings(env: Mapping[str, str], app_id: str, master: str, scratch: Path) -> None:
    """What rank.py reads: the train job's variables, its working directory, the stop file."""
    ranks = rank_environment(env, app_id, master, scratch)
    atomic_write_json(
        scratch / SETTINGS_FILE, {"cwd": os.getcwd(), "env": ranks, "stop_file": str(scratch / STOP_FILE)}
    )


def wait_for_ranks(run_dir: Path, timeout_s: float = RANKS_GONE_S) -> None:
    """Until no rank of the run holds its attempt lock (each does for its lifetime), for at most ``timeout_s``.
    A lost executor ends the barrier stage while the other tasks' ranks are still on their way out (their
    rendezvous fails within seconds): the train job ends after them, so a rerun finds the run free."""
    deadline = time.monotonic() + timeout_s
    while attempt.is_live(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)


def cancel_on_failure(context: Any, failure: Path) -> None:
    """A rank that stops on a snakeddp error leaves the others waiting in a collective: end the job."""
    while not failure.exists():
        time.sleep(0.5)
    context.cancelAllJobs()


def judge(args: argparse.Namespace, paths: RunPaths, requested: list[int], error: BaseException | None) -> int:
    if args.failure_file.exists():
        return 1  # a rank's own line, which snakeddp.launch prints once
    if requested:
        return PREEMPTED_EXIT_CODE if paths.last_checkpoint.exists() else 128 + requested[0]
    if paths.provenance.exists():
        return 0
    raise SparkError(failure_line(args, error))


def failure_line(args: argparse.Namespace, error: BaseException | None) -> str:
    text = str(error) if error is not None else ""
    resume = "rerun the same command"
    if newest_checkpoint(args.run_dir) is not None:
        resume += ": the run resumes from its newest checkpoint"
    if sessions.TOO_FEW_SLOTS.search(text):
        if args.gpu:
            return (
                f"the Spark cluster has fewer free task slots than the run's {args.num_processes} ranks "
                f"(spark.task.cpus={args.threads} and one GPU each), so no rank started. HINT: add workers with free "
                "GPUs (a standalone worker offers them with spark.worker.resource.gpu.amount and a discovery script, "
                "docs/spark.md), stop other applications, or lower launch.nodes x launch.devices."
            )
        return (
            f"the Spark cluster has fewer free task slots than the run's {args.num_processes} ranks "
            f"(spark.task.cpus={args.threads} each), so no rank started. HINT: add workers or cores, stop other "
            "applications, or lower launch.nodes x launch.devices."
        )
    lost = EXECUTOR_LOST.search(text)
    if lost:
        executor = lost["id"] or lost["id2"]
        # Its worker may be gone with it: the rerun needs the run's task slots again, or it is refused for too few.
        return (
            f"Spark executor {executor} was lost mid-training, and the job ended. HINT: once the cluster has its "
            f"workers again (the master's web UI lists them; a lost worker is started again), {resume}."
        )
    stage = FAILED_STAGE.search(text)
    if stage:
        reason = stage["reason"]
    else:
        reason = sessions.first_line(error) if error else "TorchDistributor returned, but no rank wrote provenance.json"
    return (
        f"the Spark job ended before the run finished: {reason}. "
        f"HINT: {resume}; the executors' logs are in the workers' work directories."
    )


def main(argv: Sequence[str] | None = None) -> int:
    args, entry = parse_args(argv)

    def step() -> int:
        return run(args, entry, dict(os.environ))

    # The driver's own one line goes where the ranks' go: snakeddp.launch prints it once.
    return exit_code("snakeddp.spark", step, failure_file=args.failure_file)


if __name__ == "__main__":
    raise SystemExit(main())
