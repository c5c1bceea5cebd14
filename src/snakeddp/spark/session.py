"""A Spark application's session: the settings snakeddp gives it, starting it, and why it did not start,
in one line. Used by a run's own driver (snakeddp.spark.driver) and by the invocation's shared
application (snakeddp.spark.application)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from snakeddp.spark import SparkError
from snakeddp.spark.settings import Settings
from snakeddp.util import threads
from snakeddp.util.fsutil import atomic_write_text

# pyspark 4.3 warns that it does not fully support pandas 3 (the core's); TorchDistributor uses pandas
# only to wrap rank 0's result (None here) in one Arrow batch.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)

T = TypeVar("T")

#: The script each rank's torchrun runs in its Spark task.
RANK_SCRIPT = Path(__file__).with_name("rank.py")


@dataclass(frozen=True)
class Shape:
    """What an application is asked for: ``slots`` ranks at most at once (spark.cores.max is slots x
    threads), each with ``threads`` cores (spark.task.cpus) and, where ``gpu``, one GPU."""

    name: str  # spark.app.name's tail: the run, or the workflow whose runs share the application
    slots: int
    threads: int
    gpu: bool
    #: The slots the session waits for before it starts (of ``slots``): the largest run's ranks.
    first: int = 0


# Spark waits 15 s x 40 checks (about 10 minutes) when the barrier stage has too few free slots;
# executors register within seconds of the session, which waits for them first (minRegistered...).
BARRIER_CHECK = {
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "3",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "30s",
}
# The application's JVMs (its driver, its executors) coordinate the ranks and compute nothing: the JIT's
# first tier and the serial collector start them on about half the CPU (measured with 2 one-core
# workers: the session and its executors 7.6 s -> 4.1 s). The cluster's own executor options are kept,
# and where they pick a collector or a JIT tier, theirs stands (two collectors: the JVM refuses to
# start); a spark.conf's options replace ours.
JVM_START = {
    "-XX:TieredStopAtLevel=1": re.compile(r"-XX:TieredStopAtLevel="),
    "-XX:+UseSerialGC": re.compile(r"-XX:\+Use\w*GC\b"),
}
DRIVER_JAVA = "spark.driver.extraJavaOptions"
EXECUTOR_JAVA = "spark.executor.extraJavaOptions"
# Spark's WARN lines and stack traces are not the user's: the driver says what failed in one line
# (a spark.driver.extraJavaOptions in the config's spark.conf replaces this, to see them). A driver started from
# Python is an interpreter's to Spark: PythonGatewayServer sets the console to its own logger's level, WARN unless
# configured, and says so on stderr ("Setting default log level to "WARN". To adjust logging level use
# sc.setLogLevel(newLevel)...", in every ingest log; Logging.initializeLogging, read in pyspark 4.3's jars): that
# logger is given the root's level, so nothing changes and nothing is said.
LOG4J2 = """rootLogger.level = off
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = off
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n
logger.client.name = org.apache.spark.deploy.client.StandaloneAppClient$ClientEndpoint
logger.client.level = warn
logger.client.additivity = false
logger.client.appenderRef.file.ref = client
appender.client.type = File
appender.client.name = client
appender.client.fileName = {client_log}
appender.client.layout.type = PatternLayout
appender.client.layout.pattern = %m%n%throwable
"""
# A master that requires spark.authenticate refuses a driver without its secret, or with another, at
# registration; Spark's client tries 3 times, 20 s apart (StandaloneAppClient's, not a setting), then its
# context stops and the session fails as "Cannot call methods on a stopped SparkContext". The client's
# warnings go to a file of their own (LOG4J2), watched while the session starts, so the first refusal ends it
# (the master's port answered: master.check_reachable).
CLIENT_LOG = "master-client.log"
REGISTRATION_FAILED = "Failed to connect to master"
# Spark's cause: a driver without the secret reads the first; one with another secret only the last.
AUTH_SAID = re.compile(r"Expected SaslMessage[^\n(]*|[\w.]*SaslException: [^\n]*")
CAUSE_SAID = re.compile(r"^Caused by: (?:[\w$]+\.)+[\w$]*: (?P<message>.+)$", re.M)


# Spark's barrier check: a stage of more tasks than the session's free slots.
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


def spark_settings(
    shape: Shape,
    spark: Settings,
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
        "spark.app.name": f"snakeddp {shape.name}",
        "spark.task.cpus": str(shape.threads),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # TorchDistributor's temporary files, torchrun's /tmp/torchelastic_* and Spark's own
        # spark-* directories go where the run's files are, and leave with the driver's scratch: the driver
        # JVM's own (spark-submit's, made before spark.local.dir is read) too, which a killed JVM left in /tmp.
        "spark.local.dir": str(scratch / "local"),
        "spark.executorEnv.TMPDIR": str(scratch / "tmp"),
        "spark.pyspark.python": sys.executable,
        DRIVER_JAVA: (
            f"-Dlog4j2.configurationFile=file:{scratch / 'log4j2.properties'} -Djava.io.tmpdir={scratch / 'tmp'} "
            f"{jvm_start('')}"
        ),
        EXECUTOR_JAVA: jvm_start(cluster_defaults.get(EXECUTOR_JAVA, "")),
        **BARRIER_CHECK,
    }
    if master.startswith(("spark://", "local-cluster")):
        # Ask a standalone cluster for the cores the ranks need, and no more: the session waits
        # until they are registered, so a short barrier check means "not enough slots", not "not yet".
        settings["spark.cores.max"] = str(shape.slots * shape.threads)
        if shape.first and shape.first < shape.slots:
            # A shared application asks for every run's slots, and starts once the largest run fits.
            settings["spark.scheduler.minRegisteredResourcesRatio"] = f"{shape.first / shape.slots:.4f}"
    theirs = {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in spark.conf.items()}
    if shape.gpu:
        settings.update(gpu_settings(shape, master, {**cluster_defaults, **theirs}))
    return {**settings, **theirs}


def jvm_start(theirs: str) -> str:
    """JVM_START's flags that ``theirs`` (options already given) does not set otherwise, then theirs."""
    ours = [flag for flag, same in JVM_START.items() if not same.search(theirs)]
    return " ".join([*ours, theirs]).strip()


def gpu_settings(shape: Shape, master: str, given: Mapping[str, str]) -> dict[str, str]:
    """What Spark needs to give each rank a GPU, where ``given`` (the cluster's spark-defaults.conf and
    the config's spark.conf) does not say: TorchDistributor counts one task per
    spark.task.resource.gpu.amount GPUs, and a task gets GPUs only from an executor that asked for them."""
    settings = {} if GPU_TASK in given else {GPU_TASK: "1"}
    # local[N] has no executors: its tasks take the driver's GPUs there (spark.driver.resource.gpu.*).
    if not has_executors(master):
        return settings
    # Each setting on its own: a spark-defaults.conf that sizes executors by cores alone (common on clusters
    # sized for CPU jobs) still needs executors that ask for a GPU, or Spark refuses every GPU task.
    if GPU_EXECUTOR not in given:
        settings[GPU_EXECUTOR] = "1"
    if EXECUTOR_CORES not in given and GPU_EXECUTOR not in given:
        settings[EXECUTOR_CORES] = str(shape.threads)
    return settings


def has_executors(master: str) -> bool:
    """Whether the master's tasks run in executors (local and local[N] run them in the driver)."""
    return not (master == "local" or master.startswith("local["))


def start_session(settings: Mapping[str, str]) -> Any:
    """A SparkSession, what TorchDistributor runs in (a run's own driver): on start_context's context, so its JVM
    is started as every driver JVM of ours is; the builder then takes that context."""
    from pyspark.sql import SparkSession

    start_context(settings)
    return SparkSession.builder.config(map=dict(settings)).getOrCreate()


def start_context(settings: Mapping[str, str]) -> Any:
    """A bare SparkContext: what the shared application's barrier stages and an ingestion need (a SparkSession's
    SQL side costs 1.5-2 s more to start, measured with 2 one-core workers). The driver's JVM, where this process
    starts one, writes to this process's stderr through ``JvmStderr``: the one place every driver JVM of ours
    starts (start_session's too)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf().setAll(list(settings.items()))
    if SparkContext._gateway is not None:  # the process's JVM, started by an earlier context: it keeps its stderr
        return SparkContext(conf=conf)
    with JvmStderr() as stderr:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": stderr.fd})
    return SparkContext(conf=conf, gateway=gateway)


# What the JVM's module system prints as the driver's JVM starts, for the incubator module Spark's launcher adds to
# every JVM it starts (spark-launcher 4.3's JavaModuleOptions, --add-modules=jdk.incubator.vector): before any
# logging is set up, by no switch, so log4j2's settings cannot leave it out, and it was the one line of Spark's in
# every ingest log.
JVM_NOTE = b"WARNING: Using incubator modules: jdk.incubator.vector\n"


class JvmStderr:
    """The driver's JVM's stderr: a pipe whose lines a thread copies to this process's stderr (a job's log), every
    line but JVM_NOTE, so what the JVM says of a failure (a refused setting, a crash) reaches the log as before.
    ``fd`` is the pipe's end to start the JVM with; leaving the block closes this process's copy of it and, where
    the JVM did not start, waits until every line it wrote is copied (``gateway_said`` reads them from the log)."""

    def __init__(self) -> None:
        self._read, self.fd = os.pipe()
        self._thread = threading.Thread(target=self._copy, name="snakeddp-spark-jvm-stderr", daemon=True)

    def __enter__(self) -> JvmStderr:
        threads.start(self._thread)
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        os.close(self.fd)
        if kind is not None:  # the JVM exited (or was killed): its end of the pipe is closed too
            self._thread.join(timeout=10)

    def _copy(self) -> None:
        with os.fdopen(self._read, "rb", buffering=0) as pipe:
            for line in iter(pipe.readline, b""):
                if line != JVM_NOTE:
                    _write_stderr(line)


def _write_stderr(data: bytes) -> None:
    """``data`` on file descriptor 2 whole (a job's log, or the application's), dropped where it is gone."""
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(2, data) :]


def distribute(num_processes: int, gpu: bool, settings: Path, entry: Sequence[str]) -> BaseException | None:
    """Run a run's ranks in the active session, one TorchDistributor barrier stage; the exception the Spark
    job ended with, if any (the driver judges it with the run's records)."""
    from pyspark.ml.torch.distributor import TorchDistributor

    distributor = TorchDistributor(num_processes=num_processes, local_mode=False, use_gpu=gpu)
    # Its constructor sets its logger to INFO again ("Started distributed training with 2 executor processes").
    distributor.logger.setLevel(logging.WARNING)
    try:
        distributor.run(str(RANK_SCRIPT), "--settings", str(settings), "--", *entry)
    except Exception as error:  # Py4JJavaError, PySparkException: the job's end
        return error
    return None


# What a JVM that would not start wrote to this process's stderr before pyspark's JAVA_GATEWAY_EXITED: an
# exception of spark-submit's ("Exception in thread "main" org.apache.spark.SparkException: Executor memory must
# be a positive number") or of the JVM's own ("Invalid maximum heap size: -Xmxlots").
GATEWAY_SAID = re.compile(
    r'^(?:Exception in thread "[^"]*" )?(?:[\w$]+\.)+[\w$]*(?:Exception|Error): (?P<message>.+)$'
    r"|^(?P<jvm>Invalid .+|Unrecognized .+)$",
    re.M,
)


def gateway_said(error: BaseException) -> str | None:
    """Where the driver's JVM exited before pyspark reached it, what the JVM said (it writes to this process's
    stderr: a job's log, or the shared application's); None where that is not this error or cannot be read."""
    if "JAVA_GATEWAY_EXITED" not in str(error):
        return None
    try:
        log = Path(os.readlink("/proc/self/fd/2"))
        with log.open("rb") as handle:
            handle.seek(max(log.stat().st_size - 65536, 0))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:  # stderr is a pipe or a terminal: pyspark's words only
        return None
    found = [match["message"] or match["jvm"] for match in GATEWAY_SAID.finditer(tail)]
    return found[-1].strip() if found else None


def session_failure(master: str, source: str, error: BaseException) -> str:
    """Why the session did not start, in Spark's words: resource settings Spark refused are not a master
    that is down (the master answered check_reachable already); a JVM that would not start said why on stderr."""
    jvm = gateway_said(error)
    if jvm is not None:
        return (
            f"the Spark driver's JVM did not start, so there is no session with {master}: {jvm}. HINT: fix the "
            "setting it names in the config's spark.conf (or spark-defaults.conf, or the profile), then rerun."
        )
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


def started(start: Callable[[], T], scratch: Path, master: str, source: str) -> T:
    """``start()``'s session or context, else a SparkError of one line: a master that refused the driver's secret
    within a second of saying so (its JVM stopped), any other failure as session_failure tells it."""
    client_log = scratch / CLIENT_LOG
    client_log.unlink(missing_ok=True)
    refused: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.25):
            try:
                said = client_log.read_text(errors="replace")
            except OSError:  # not written yet
                continue
            if REGISTRATION_FAILED in said:
                refused.append(registration_said(said))
                stop_driver_jvm()
                return

    watcher = threads.start(threading.Thread(target=watch, name="snakeddp-spark-refusal", daemon=True))
    try:
        return start()
    except Exception as error:  # py4j and pyspark raise their own types for a JVM that will not start
        done.set()
        watcher.join()
        if refused:
            raise SparkError(refused_line(master, source, refused[0])) from None
        raise SparkError(session_failure(master, source, error)) from None
    finally:
        done.set()


def stop_driver_jvm() -> None:
    """The driver's JVM killed, so the session's start in progress fails at once (pyspark keeps the
    spark-submit process it started as the gateway's ``proc``)."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    if process is not None:
        process.kill()


def registration_said(log: str) -> str:
    """Why the master did not take the driver, in Spark's words, from its client's log."""
    if found := AUTH_SAID.search(log):
        return found[0].strip()
    causes = CAUSE_SAID.findall(log)
    return causes[-1].strip() if causes else REGISTRATION_FAILED


def refused_line(master: str, source: str, said: str) -> str:
    return (
        f"the Spark master at {master} (named by {source}) refused this driver's registration (Spark: {said}): "
        "a master that requires spark.authenticate refuses a driver without its secret or with another. HINT: give "
        "the driver the cluster's spark-defaults.conf, which holds spark.authenticate.secret (export "
        "SPARK_CONF_DIR=<its folder>; scripts/spark_cluster.py start --secret prints it), then rerun; docs/spark.md."
    )


def spark_said(error: BaseException) -> str:
    """The JVM exception's own message (Spark's words), else the error's first line."""
    found = JAVA_ERROR.search(str(error))
    return found["message"].strip() if found else first_line(error)


def first_line(error: BaseException) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def prepare_scratch(scratch: Path) -> None:
    """The application's scratch: the executors' TMPDIR, spark.local.dir and the driver's logging."""
    for folder in ("tmp", "local"):
        (scratch / folder).mkdir(parents=True, exist_ok=True)
    atomic_write_text(scratch / "log4j2.properties", LOG4J2.replace("{client_log}", str(scratch / CLIENT_LOG)))
