"""One rank of a spark run: what runs in its Spark task, forked from the task's Python worker by
``snakeddp.spark.stage`` (the workflow's shared application) or started by TorchDistributor's torchrun
(a run's own application) as a script.

    rank.py --settings <run>/spark/rank-env.json -- <snakeddp.train's arguments>

torchrun runs a script, not a module, so this file puts the package's root where its own folder
was on sys.path, takes the driver's settings (the train job's variables, its working directory,
the stop file), names the executor it runs in (a GPU rank says which GPU its task was given, in one
line, before any check that may stop it), and hands over to ``snakeddp.train``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script (torchrun's), Python put snakeddp/spark/ first on sys.path, where its modules would
# shadow top-level ones; the package's root (src/) goes there instead. Run as a module (a rank forked by
# snakeddp.spark.stage), sys.path is the worker's.
if not __package__:
    sys.path[0] = str(Path(__file__).resolve().parents[2])

import itertools
import json
import os
import re
import signal
import threading
import time

import psutil

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
STOP_POLL_S = 0.5
# How long a rank whose peer is gone waits for Spark to kill its task (the job has ended) before it exits.
PEER_LOST_WAIT_S = 30.0
# How gloo (and NCCL's socket transport) fail a collective whose peer process is gone.
PEER_LOST = re.compile(r"Connection (reset|closed) by peer|Broken pipe|remote process exited", re.IGNORECASE)


def executor_variables() -> dict[str, str]:
    """The executor JVM this task runs in (id, host, pid), read from its command line among our ancestors."""
    from snakeddp.spark import jobside

    for process in psutil.Process().parents():
        try:
            argv = process.cmdline()
        except psutil.Error:
            continue
        if EXECUTOR_CLASS in argv:
            flags = dict(itertools.pairwise(argv))
            return {
                jobside.EXECUTOR_ID: flags.get("--executor-id", "?"),
                jobside.EXECUTOR_HOST: flags.get("--hostname", ""),
                jobside.EXECUTOR_PID: str(process.pid),
            }
    return {}


def placement(rank: int | str, executor: dict[str, str], gpus: str) -> str | None:
    """Where a GPU rank runs, and the GPU its task was given (its CUDA_VISIBLE_DEVICES, ``gpus``): one line,
    before any check that may stop the rank, that shows each rank got its own. None for a CPU rank."""
    from snakeddp.spark import jobside

    given = jobside.gpus_given({"CUDA_VISIBLE_DEVICES": gpus})
    if not given:
        return None
    where = f"executor {executor.get(jobside.EXECUTOR_ID, '?')}"
    if executor.get(jobside.EXECUTOR_HOST):
        where += f" on {executor[jobside.EXECUTOR_HOST]}"
    shown = ",".join(given)
    return f"snakeddp.spark: rank {rank} in {where} with GPU {shown} (CUDA_VISIBLE_DEVICES={shown})"


def watch(stop_file: Path) -> None:
    """Turn the driver's stop request into the signal it received, raised in this rank: the
    preemption callback then stops every rank at one step and saves last.ckpt."""
    while not stop_file.exists():
        time.sleep(STOP_POLL_S)
    name = stop_file.read_text(encoding="utf-8").strip()
    os.kill(os.getpid(), getattr(signal, name, signal.SIGTERM))


def main(argv: list[str]) -> int:
    if argv[:1] != ["--settings"] or argv[2:3] != ["--"]:
        raise SystemExit("usage: rank.py --settings FILE -- ARGS (started by snakeddp.spark.driver)")
    settings = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    # Before torch is imported: OMP_NUM_THREADS and the network variables are read at import and init.
    os.environ.update(settings["env"])
    from snakeddp.spark import jobside

    if jobside.EXECUTOR_ID not in os.environ:  # under torchrun; a forked rank's task said it already
        executor = executor_variables()
        os.environ.update(executor)
        if said := placement(os.environ["RANK"], executor, os.environ.get("CUDA_VISIBLE_DEVICES", "")):
            print(said, file=sys.stderr, flush=True)
    # The task runs in the worker's work directory; the run's paths are the driver's, relative to its
    # directory, and `python -m snakeddp.train` would have that directory on sys.path (user models).
    os.chdir(settings["cwd"])
    sys.path.insert(1, settings["cwd"])
    threading.Thread(target=watch, args=(Path(settings["stop_file"]),), daemon=True).start()
    from snakeddp.util.shutdown import freeze_imports, pause_collection

    pause_collection()  # torch and Lightning, where no daemon imported them (snakeddp.util.shutdown)
    from snakeddp.train import report_errors

    freeze_imports()
    try:
        return report_errors(argv[3:])
    except RuntimeError as error:
        if not PEER_LOST.search(str(error)):
            raise
        # Another rank's executor is gone (killed, its machine lost): Spark ends the job, and the
        # driver names the lost executor in one line; this rank's traceback would only bury it. So
        # would torchrun's report of this rank's exit (its ChildFailedError), which reaches the
        # driver's log unless Spark kills this task first, as it does on its way: wait for that.
        time.sleep(PEER_LOST_WAIT_S)
        return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
