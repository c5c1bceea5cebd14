"""The Spark application of one run: its driver starts the ranks with TorchDistributor and judges the run.

    python -m snakeddp.spark.driver --num-processes=2 --threads=1 -- --config results/runs/base/run.yaml \\
        --run-dir results/runs/base --data ... --launcher torchdistributor --failure-file .../failure.txt

``snakeddp.launch`` starts it (the torchdistributor launcher) with the run's environment. It connects
to the master (``snakeddp.spark.master``), asks for ``num_processes`` task slots, and runs
``snakeddp/spark/rank.py`` under one torchrun per barrier task. The ranks work in this directory
and write the run directory, so driver and executors must share its path (as Slurm's nodes do).

``TorchDistributor.run(path)`` returns None whatever torchrun exits with, so the run is judged by
its own records: ``provenance.json`` written (done), the stop request made (preempted, 75), a
rank's one line in the failure file (1), else one line of ours. A signal from snakeddp.launch is
passed to every rank through a stop file in the run directory (``rank.py`` watches it), since
the driver cannot signal processes on other machines.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from snakeddp.cluster import network
from snakeddp.cluster.lifecycle import FORWARDED, PREEMPTED_EXIT_CODE
from snakeddp.cluster.torchdistributor import APP_ID, MASTER
from snakeddp.errors import SparkError, exit_code
from snakeddp.run import attempt, variables
from snakeddp.run.layout import RunPaths
from snakeddp.spark import PLATFORM
from snakeddp.spark import master as masters
from snakeddp.util.fsutil import atomic_write_json, atomic_write_text

RANK_SCRIPT = Path(__file__).with_name("rank.py")
SETTINGS_FILE = "rank-env.json"
STOP_FILE = "stop"
# How long the driver waits, after its Spark job ended, for ranks still exiting on the executors.
RANKS_GONE_S = 30.0
# pyspark 4.3 warns that it does not fully support pandas 3 (the core's); TorchDistributor uses pandas
# only to wrap rank 0's result (None here) in one Arrow batch.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
# Variables of the train job every rank needs; the rest of the driver's environment (PATH, HOME,
# JAVA_HOME...) belongs to this machine, not to the executors'.
RANK_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONPATH")
# Spark waits 15 s x 40 checks (about 10 minutes) when the barrier stage has too few free slots;
# executors register within seconds of the session, which waits for them first (minRegistered...).
BARRIER_CHECK = {
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "3",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "30s",
}
# Spark's WARN lines and stack traces are not the user's: the driver says what failed in one line
# (a spark.driver.extraJavaOptions in the config's spark.conf replaces this, to see them).
LOG4J2 = """rootLogger.level = off
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n
"""
FAILED_STAGE = re.compile(r"Job aborted due to stage failure: (?P<reason>[^\n]*)")
EXECUTOR_LOST = re.compile(
    r"ExecutorLostFailure \(executor (?P<id>\S+) exited[^)]*\)|executor (?P<id2>\S+) \(\S+\) lost"
)
TOO_FEW_SLOTS = re.compile(r"barrier stage that requires more slots|BARRIER_.*SLOTS|max concurrent tasks", re.I)
# What a JVM exception says, past py4j's "An error occurred while calling ..." line.
JAVA_ERROR = re.compile(r"^:?\s*(?:[\w$]+\.)+[\w$]*(?:Exception|Error|Failed): (?P<message>.+)$", re.M)
# Spark's refusals of resource settings (ResourceProfile, ResourceUtils): "No executor resource configs
# were specified...", "The executor resource: gpu, amount: 1 needs to be >= the task resource request
# amount of 2.0", "The number of cores per executor (=1) has to be >= the number of cpus per task = 2".
RESOURCE_REFUSAL = re.compile(r"resource|cores per executor|cpus per task", re.I)
# A GPU run is one rank per task, one GPU per task, and one task per executor: executors of one GPU
# and the rank's cores, so a worker offering 4 GPUs runs 4 ranks. Without spark.executor.cores a
# standalone worker starts one executor with all its cores and 1 GPU, a single slot (measured:
# a 2-core, 2-GPU worker gave 2 ranks one slot, and the barrier stage failed).
GPU_TASK = "spark.task.resource.gpu.amount"
GPU_EXECUTOR = "spark.executor.resource.gpu.amount"
EXECUTOR_CORES = "spark.executor.cores"


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


def spark_settings(
    args: argparse.Namespace,
    section: Mapping[str, Any],
    master: str,
    scratch: Path,
    cluster_defaults: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The application's settings: ours first, the config's spark.conf over them. ``cluster_defaults``:
    spark-defaults.conf's, which Spark reads itself; ours would override them, so GPU settings it
    makes are left to it."""
    cluster_defaults = cluster_defaults or {}
    settings = {
        "spark.master": master,
        "spark.app.name": f"snakeddp {args.run_dir.name}",
        "spark.task.cpus": str(args.threads),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # TorchDistributor's temporary files, torchrun's /tmp/torchelastic_* and Spark's own
        # spark-* directories go where the run's files are, and leave with the driver's scratch.
        "spark.local.dir": str(scratch / "local"),
        "spark.executorEnv.TMPDIR": str(scratch / "tmp"),
        "spark.pyspark.python": sys.executable,
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{scratch / 'log4j2.properties'}",
        **BARRIER_CHECK,
    }
    if master.startswith(("spark://", "local-cluster")):
        # Ask a standalone cluster for the cores the ranks need, and no more: the session waits
        # until they are registered, so a short barrier check means "not enough slots", not "not yet".
        settings["spark.cores.max"] = str(args.num_processes * args.threads)
    theirs = {
        key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in section["conf"].items()
    }
    if args.gpu:
        settings.update(gpu_settings(args, master, {**cluster_defaults, **theirs}))
    return {**settings, **theirs}


def gpu_settings(args: argparse.Namespace, master: str, given: Mapping[str, str]) -> dict[str, str]:
    """What Spark needs to give each rank a GPU, where ``given`` (the cluster's spark-defaults.conf and
    the config's spark.conf) does not say: TorchDistributor counts one task per
    spark.task.resource.gpu.amount GPUs, and a task gets GPUs only from an executor that asked for them."""
    settings = {} if GPU_TASK in given else {GPU_TASK: "1"}
    # local[N] has no executors: TorchDistributor takes the driver's GPUs there (spark.driver.resource.gpu.*).
    has_executors = not (master == "local" or master.startswith("local["))
    if has_executors and GPU_EXECUTOR not in given and EXECUTOR_CORES not in given:
        settings.update({GPU_EXECUTOR: "1", EXECUTOR_CORES: str(args.threads)})
    return settings


def rank_environment(env: Mapping[str, str], app_id: str, master: str, scratch: Path) -> dict[str, str]:
    """What every rank adds to its task's environment (rank.py reads it from the settings file)."""
    # Not the spark section: it is the driver's, and its spark.conf may hold spark.authenticate.secret,
    # which rank 0 would record with its SNAKEDDP_* variables.
    ours = {
        name: value
        for name, value in env.items()
        if (name.startswith("SNAKEDDP_") or name in RANK_VARIABLES) and name != variables.PLATFORM_SECTION
    }
    return {**ours, **network.forwarded(env), APP_ID: app_id, MASTER: master, "TMPDIR": str(scratch / "tmp")}


def start_session(settings: Mapping[str, str]) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def run(args: argparse.Namespace, entry: list[str], env: Mapping[str, str]) -> int:
    section = variables.platform_section(env, PLATFORM)
    master, source = masters.check(section, env)
    paths = RunPaths(args.run_dir)
    scratch = paths.platform(PLATFORM).resolve()
    shutil.rmtree(scratch, ignore_errors=True)
    for folder in ("tmp", "local"):
        (scratch / folder).mkdir(parents=True)
    atomic_write_text(scratch / "log4j2.properties", LOG4J2)
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
    started = time.monotonic()
    defaults = masters.defaults_file(env)
    cluster_defaults = masters.read_defaults(defaults) if defaults is not None and defaults.is_file() else {}
    try:
        session = start_session(spark_settings(args, section, master, scratch, cluster_defaults))
    except Exception as error:  # py4j and pyspark raise their own types for a JVM that will not start
        raise SparkError(session_failure(master, source, error)) from None
    try:
        context = session.sparkContext
        app_id = context.applicationId
        ranks = rank_environment(env, app_id, master, scratch)
        settings = {"cwd": os.getcwd(), "env": ranks, "stop_file": str(stop_file)}
        atomic_write_json(scratch / SETTINGS_FILE, settings)
        print(
            f"snakeddp.spark: application {app_id} on {master} ({source}), {args.num_processes} ranks; "
            f"session started in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        watcher = threading.Thread(target=cancel_on_failure, args=(context, args.failure_file), daemon=True)
        watcher.start()
        error = distribute(args, scratch / SETTINGS_FILE, entry)
    finally:
        session.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        wait_for_ranks(args.run_dir)
    return judge(args, paths, requested, error)


def wait_for_ranks(run_dir: Path, timeout_s: float = RANKS_GONE_S) -> None:
    """Until no rank of the run holds its attempt lock (each does for its lifetime), for at most ``timeout_s``.
    A lost executor ends the barrier stage while the other tasks' ranks are still on their way out (their
    rendezvous fails within seconds): the train job ends after them, so a rerun finds the run free."""
    deadline = time.monotonic() + timeout_s
    while attempt.is_live(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)


def distribute(args: argparse.Namespace, settings: Path, entry: list[str]) -> BaseException | None:
    """Run the ranks; the exception the Spark job ended with, if any (judged with the run's records)."""
    from pyspark.ml.torch.distributor import TorchDistributor

    distributor = TorchDistributor(num_processes=args.num_processes, local_mode=False, use_gpu=args.gpu)
    # Its constructor sets its logger to INFO again ("Started distributed training with 2 executor processes").
    distributor.logger.setLevel(logging.WARNING)
    try:
        distributor.run(str(RANK_SCRIPT), "--settings", str(settings), "--", *entry)
    except Exception as error:  # Py4JJavaError, PySparkException: the job's end, read below
        return error
    return None


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


def session_failure(master: str, source: str, error: BaseException) -> str:
    """Why the session did not start, in Spark's words: resource settings Spark refused are not a master
    that is down (the master answered check_reachable already)."""
    said = spark_said(error)
    if RESOURCE_REFUSAL.search(said):
        return (
            f"Spark refused the run's resource settings, so the driver could not start its session with {master}: "
            f"{said}. HINT: make the settings Spark names agree in the config's spark.conf (or spark-defaults.conf), "
            "or remove them there and let the driver set them (a GPU run: one GPU per task and per executor, "
            "launch.threads_per_process cores per executor; docs/spark.md)."
        )
    return (
        f"the Spark driver could not start its session with {master} (named by {source}): {said}. "
        "HINT: check that the master is up and accepts this machine, and that spark.authenticate's secret "
        "matches the cluster's (docs/spark.md)."
    )


def spark_said(error: BaseException) -> str:
    """The JVM exception's own message (Spark's words), else the error's first line."""
    found = JAVA_ERROR.search(str(error))
    return found["message"].strip() if found else first_line(error)


def failure_line(args: argparse.Namespace, error: BaseException | None) -> str:
    text = str(error) if error is not None else ""
    resume = "rerun the same command"
    if RunPaths(args.run_dir).last_checkpoint.exists():
        resume += ": the run resumes from its last.ckpt"
    if TOO_FEW_SLOTS.search(text):
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
        return f"Spark executor {executor} was lost mid-training, and the job ended. HINT: {resume}."
    stage = FAILED_STAGE.search(text)
    if stage:
        reason = stage["reason"]
    else:
        reason = first_line(error) if error else "TorchDistributor returned, but no rank wrote provenance.json"
    return (
        f"the Spark job ended before the run finished: {reason}. "
        f"HINT: {resume}; the executors' logs are in the workers' work directories."
    )


def first_line(error: BaseException) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def main(argv: Sequence[str] | None = None) -> int:
    args, entry = parse_args(argv)

    def step() -> int:
        return run(args, entry, dict(os.environ))

    # The driver's own one line goes where the ranks' go: snakeddp.launch prints it once.
    return exit_code("snakeddp.spark", step, failure_file=args.failure_file)


if __name__ == "__main__":
    raise SystemExit(main())
