"""The ingest step on the spark platform: a table of two pieces or more (snakeddp.data.spread) is read by Spark
tasks on the cluster's executors, one task per piece, each writing its piece file into the ingestion's folder,
which the executors see as they see the checkout (the shared application keeps its scratch there too); this
process then assembles the partitions, byte for byte those of a local ingestion. Any other table is ingested
here, as on the local platform.

The application is the step's own and asks for the cores the cluster's workers have free, at most one per piece:
the workflow's shared application may hold the others for training, which waits for these partitions.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from snakeddp.data import spread
from snakeddp.data import table as tables
from snakeddp.errors import TableError
from snakeddp.spark import SparkError, settings, workers
from snakeddp.spark import master as masters
from snakeddp.spark import session as sessions
from snakeddp.util.terminal import say

# How a task's Python traceback ends, inside the JVM's exception: the error's type and message.
TASK_ERROR = re.compile(r"Traceback \(most recent call last\):\n(?:[ \t].*\n)+(?P<type>[\w.]+): (?P<message>.*)")


def task_failure(error: BaseException, master: str) -> Exception:
    """A failed task's error as one line: a TableError as the task raised it, else what the task's Python said."""
    found = TASK_ERROR.search(str(error))
    if found and found["type"] == "snakeddp.errors.TableError":
        return TableError(found["message"].strip())
    said = f"{found['type']}: {found['message'].strip()}" if found else sessions.spark_said(error)
    return SparkError(
        f"the Spark tasks that ingest the table failed on {master}: {said}. "
        "HINT: check the executors' logs (the worker's work/ folder), then rerun."
    )


class NoCores(Exception):
    """The cluster has no core for the step's application: the workflow's own application may hold them all for
    the training that waits for these partitions, so the table is read here instead."""


def ingest(params: Mapping[str, Any], out_dir: str | Path, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """table.ingest's outputs, read by the executors where the table is spread, else here."""
    read = functools.partial(on_executors, spark=settings.from_environment(env), env=env)
    try:
        summary = spread.ingest(params, out_dir, read, "by Spark tasks")
    except NoCores as why:  # after spread's line that the pieces are for Spark's tasks: said as a change of plan
        say(f"ingest: {why}; the table is read here instead, not by Spark tasks")
        summary = None
    return summary if summary is not None else tables.ingest(params, out_dir)


def free_cores(spark: settings.Settings, master: str, env: Mapping[str, str]) -> int | None:
    """The cores a standalone master's alive workers have free; None where the master does not say."""
    port = workers.ui_port(spark, env)
    for host, _ in masters.standalone_addresses(master):
        try:
            state = workers.master_state(host, port)
        except (OSError, ValueError):
            continue
        return sum(int(w.get("coresfree", 0)) for w in state.get("workers", []) if w.get("state") == "ALIVE")
    return None


def on_executors(
    work: spread.Work,
    pieces: list[spread.Window],
    done: Callable[[dict[str, Any]], None],
    spark: settings.Settings,
    env: Mapping[str, str],
) -> None:
    """Each piece read by a Spark task of an application of this step's own, each handed to ``done`` as soon as
    it is read: a job per piece, submitted at once in window order (Spark runs them side by side on the cores
    it has), so the first partitions are published while later windows are read."""
    master, named_by = masters.resolve(spark.master, env)
    if not sessions.has_executors(master):
        raise NoCores(f"{master} runs Spark's tasks in the driver, on this machine, as this step would")
    free = free_cores(spark, master, env)
    if free == 0:
        raise NoCores(f"no free core on the Spark cluster at {master} (its applications hold them all)")
    slots = min(len(pieces), free or len(pieces))
    scratch = Path(work.folder) / "spark"
    sessions.prepare_scratch(scratch)
    shape = sessions.Shape("ingest", slots, 1, False)
    given = sessions.spark_settings(shape, spark, master, scratch, masters.cluster_defaults(env))
    started = time.monotonic()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' Python: this venv's (as driver.py)
    context = sessions.started(lambda: sessions.start_context(given), scratch, master, named_by)
    try:
        # The session waited for its cores (spark.scheduler.maxRegisteredResourcesWaitingTime): another application
        # may have taken the free ones first, and its tasks would wait for them as long as it holds them.
        if len(context._jsc.sc().statusTracker().getExecutorInfos()) <= 1:  # the driver's own entry
            raise NoCores(f"no executor of the Spark cluster at {master} came to application {context.applicationId}")
        say(
            f"ingest: Spark application {context.applicationId} on {master} ({named_by}), {len(pieces)} tasks on "
            f"up to {slots} cores; started in {time.monotonic() - started:.1f} s"
        )
        read = functools.partial(spread.read_piece, work)
        rdds = [context.parallelize([piece], 1).map(read) for piece in pieces]  # made here, collected on threads
        with ThreadPoolExecutor(max_workers=len(pieces), thread_name_prefix="snakeddp-ingest-job") as jobs:
            running = [jobs.submit(rdd.collect) for rdd in rdds]
            try:
                for job in as_completed(running):
                    try:
                        [result] = job.result()
                    except Exception as error:  # Py4JJavaError: a task failed (Spark retried it first)
                        raise task_failure(error, master) from None
                    done(result)
            except BaseException:
                context.cancelAllJobs()  # the other jobs' threads then end with their jobs
                raise
    finally:
        context.stop()
        shutil.rmtree(scratch, ignore_errors=True)
