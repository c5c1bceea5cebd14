"""The workflow's shared Spark application (snakeddp.spark.sharing starts it, and says why it exists).

    python -m snakeddp.spark.application --fd N --parent PID --scratch DIR --slots K --first J

One session for the invocation, started at once where the workflow says what its runs will ask for
(``{"expect": hello}``), and its executors' Python started with it (so the data and environment jobs'
time is the session's), else by the first run that asks. Its Spark settings, task cores and GPUs are
the session's; a run asking for others is declined and goes alone, unless no run has used the session
yet (an expected session then gives way to the first run's). Each connection is a run,
served in a thread of its own: its ranks are one barrier stage in the run's job group (snakeddp.spark.stage),
started once the cluster's task slots hold them beside the runs already training, and cancelled alone
when the run fails (its failure file) or its driver goes (the connection closes). SIGTERM (from
``close``, or Snakemake's death through the parent-death signal) stops the runs still training as
preempted ones, then cancels what is left and stops the session; the JVM exits with this process
whatever happens (pyspark's gateway watches its stdin).
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from snakeddp.forking import helper
from snakeddp.spark import SparkError, stage
from snakeddp.spark import master as masters
from snakeddp.spark import session as sessions
from snakeddp.spark.settings import Settings
from snakeddp.spark.sharing import session_key
from snakeddp.util import handoff
from snakeddp.util.fsutil import atomic_write_text
from snakeddp.util.words import counted

# A run whose driver went before its stage started: nothing to answer.
CLOSED = object()
# How often a run's watcher looks for its failure file and its driver.
WATCH_S = 0.5
# How long running runs get to stop at a step (and save last.ckpt) when the workflow ends under them.
STOP_GRACE_S = 15.0


class Application:
    """The session, once started, and the task slots its runs hold."""

    def __init__(self, scratch: Path, slots: int, first: int) -> None:
        self.scratch = scratch
        self.slots = slots
        self.first = first
        self.lock = threading.Lock()
        self.context: Any = None  # its SparkContext, once started
        self.key: str | None = None  # what a run must ask for to share the session
        self.used_by_a_run = False  # an expected session no run has used gives way to the first run's
        self.described: dict[str, Any] = {}
        self.free = threading.Condition()
        self.used = 0  # task slots held by the runs training now
        self.gpu, self.threads = False, 1
        self.running: dict[socket.socket, Path] = {}  # each training run's stop file

    def open(self, hello: dict[str, Any]) -> dict[str, Any]:
        """The answer to a run's hello: the application, or why the run goes alone, or why Spark failed."""
        key = session_key(hello)
        with self.lock:
            if self.context is not None and key != self.key:
                if self.used_by_a_run:
                    return {"declined": "it asks for other Spark settings, task cores or GPUs than the runs before it"}
                # Not the key in the log: the section's spark.conf may hold a secret.
                log("the first run asks for other Spark settings, task cores or GPUs than expected: its own session")
                self.context.stop()
                self.context = None
            if self.context is None:
                try:
                    self.start(hello)
                except SparkError as error:
                    return {"failed": str(error)}
            self.used_by_a_run = True
            return {"application": self.described}

    def expect(self, hello: dict[str, Any]) -> None:
        """Start the session the workflow's runs will ask for, then the executors' Python (its daemon imports
        what a rank imports, snakeddp.spark.daemon): a run's hello finds both ready, or waits for them. A
        session that fails here is started again by the first run, which then fails in its own words."""
        with self.lock:
            if self.context is not None:
                return
            try:
                self.start(hello)
            except SparkError as error:
                log(f"the expected session did not start: {error}")
                return
            context = self.context
            log(f"session {self.described['id']} started in {self.described['session_s']:.1f} s, before any run asked")
        try:
            warm_executors(context)
        except Exception as error:  # the session stopped under it (the first run asked for another, or the end)
            log(f"the executors' Python was not started ahead: {str(error).splitlines()[0] if str(error) else error!r}")

    def start(self, hello: dict[str, Any]) -> None:
        section = Settings.of(hello["section"])
        master, source = masters.check(section, os.environ)
        sessions.prepare_scratch(self.scratch)
        shape = sessions.Shape(
            name=f"workflow {Path.cwd().name}",
            slots=max(self.slots, hello["num_processes"]),
            threads=hello["threads"],
            gpu=hello["gpu"],
            first=min(self.first, hello["num_processes"]),
        )
        settings = sessions.spark_settings(shape, section, master, self.scratch, masters.cluster_defaults(os.environ))
        # The executors' Python imports what a rank imports, once (snakeddp.spark.stage); spark.conf may say otherwise.
        settings = {stage.DAEMON_SETTING: stage.DAEMON, **settings}
        started = time.monotonic()
        self.context = sessions.started(lambda: sessions.start_context(settings), self.scratch, master, source)
        self.gpu, self.threads, self.key = hello["gpu"], hello["threads"], session_key(hello)
        self.described = {
            "id": self.context.applicationId,
            "master": master,
            "source": source,
            "session_s": round(time.monotonic() - started, 1),
        }

    def serve(self, conn: socket.socket) -> None:
        """One run, from its hello to its stage's end (or the workflow's expected hello)."""
        with conn:
            message, _ = handoff.receive(conn)
            if message is not None and isinstance(message.get("expect"), dict):
                conn.close()
                self.expect(message["expect"])
                return
            if message is None or not isinstance(message.get("hello"), dict):
                return
            answer = self.open(message["hello"])
            handoff.send(conn, answer)
            if "application" not in answer:
                return
            message, _ = handoff.receive(conn)
            if message is None or not isinstance(message.get("train"), dict):
                return
            request = message["train"]
            ranks = int(request["num_processes"])
            first = _Slots(self, ranks, waits=sender(conn, "waiting"))
            error = self.in_turn(conn, request, first)
            if isinstance(error, str) and sessions.TOO_FEW_SLOTS.search(error) and first.others:
                # The slots counted were not free after all (another application's, or fewer than Spark's
                # count): once the others are done, the run has the session to itself.
                error = self.in_turn(conn, request, _Slots(self, ranks, alone=True))
            if error is not CLOSED:
                handoff.send(conn, {"done": error})

    def in_turn(self, conn: socket.socket, request: dict[str, Any], slots: _Slots) -> str | object | None:
        with slots:
            if closed(conn):
                return CLOSED  # its driver went while it waited
            if Path(request["stop_file"]).exists():
                return None  # stopped while it waited (Ctrl-C): its driver judges the run by its records, untouched
            self.running[conn] = Path(request["stop_file"])
            try:
                return self.train(conn, request)
            finally:
                del self.running[conn]

    def capacity(self) -> int:
        """Task slots of the session's executors: a standalone cluster's defaultParallelism is their cores
        (at least 2, or spark.default.parallelism; a wrong count only costs a retry, above). A GPU session
        runs one run at a time: its slots are the executors' GPUs, which Spark does not count here."""
        return 1 if self.gpu else max(1, self.context.defaultParallelism // self.threads)

    def train(self, conn: socket.socket, request: dict[str, Any]) -> str | None:
        """The run's barrier stage, in its own job group; what it ended with."""
        context = self.context
        group = str(request["group"])
        context.setJobGroup(group, f"snakeddp run {Path(group).name}", interruptOnCancel=True)
        ended = threading.Event()
        watcher = threading.Thread(
            target=self.watch, args=(conn, Path(request["failure_file"]), group, ended), daemon=True
        )
        watcher.start()
        log(f"run {Path(group).name}: starting {counted(int(request['num_processes']), 'rank')}")
        try:
            ended_with = stage.distribute(
                self.context,
                int(request["num_processes"]),
                bool(request["gpu"]),
                Path(request["settings"]),
                request["entry"],
                sender(conn),
            )
        finally:
            ended.set()
        log(f"run {Path(group).name}: its stage ended ({'ok' if ended_with is None else 'failed'})")
        return None if ended_with is None else str(ended_with) or type(ended_with).__name__

    def watch(self, conn: socket.socket, failure: Path, group: str, ended: threading.Event) -> None:
        """A rank that stops on a snakeddp error leaves the others waiting in a collective, and a driver that
        is gone cannot judge its run: end the run's stage, and only its."""
        while not ended.wait(WATCH_S):
            if failure.exists() or closed(conn):
                self.context.cancelJobGroup(group)
                return

    def stop(self) -> None:
        """The workflow ended: running runs are stopped as a preempted run is (their ranks save last.ckpt at
        one step, through the stop file their drivers would write), given STOP_GRACE_S, then cancelled."""
        if self.context is None:
            return
        for stop_file in list(self.running.values()):
            if not stop_file.exists():
                atomic_write_text(stop_file, "SIGTERM")
        deadline = time.monotonic() + STOP_GRACE_S
        while self.running and time.monotonic() < deadline:
            time.sleep(0.2)
        self.context.cancelAllJobs()
        self.context.stop()


class _Slots:
    """Held while a run trains: a run waits until its ranks fit the slots the others leave, or (``alone``)
    until no other run trains (a run larger than the whole session starts alone, and Spark's barrier check
    refuses it in one line, as before). ``others``: whether other runs were training when it started."""

    def __init__(
        self, application: Application, ranks: int, alone: bool = False, waits: Callable[[str], None] | None = None
    ) -> None:
        self.application, self.ranks, self.alone, self.waits = application, ranks, alone, waits
        self.others = False

    def __enter__(self) -> None:
        app = self.application
        with app.free:
            # The session's capacity is asked once per look (a call into the JVM), and again after each run leaves.
            capacity = app.capacity()
            if self.waits is not None and self._must_wait(capacity):
                self.waits(
                    f"the other runs hold {app.used} of its {capacity} task slots; this run starts once they "
                    f"leave it {counted(self.ranks, 'slot')}"
                )
            while self._must_wait(capacity):
                app.free.wait()
                capacity = app.capacity()
            self.others = app.used > 0
            app.used += self.ranks

    def _must_wait(self, capacity: int) -> bool:
        return bool(self.application.used) and (self.alone or self.application.used + self.ranks > capacity)

    def __exit__(self, *exc: object) -> None:
        app = self.application
        with app.free:
            app.used -= self.ranks
            app.free.notify_all()


def warm_executors(context: Any) -> None:
    """One task per slot, which does nothing: each executor it reaches starts its Python daemon for it."""
    slots = max(1, context.defaultParallelism)
    context.setJobGroup("snakeddp-warm-up", "snakeddp: the executors' Python imports what a rank imports")
    started = time.monotonic()
    context.parallelize(range(slots), slots).foreachPartition(lambda _: None)
    log(f"the executors' Python started in {time.monotonic() - started:.1f} s ({slots} tasks)")


def log(line: str) -> None:
    """A line of the application's own (its log, beside its scratch: snakeddp.spark.sharing.LOG)."""
    print(f"{time.strftime('%H:%M:%S')} snakeddp.spark.application: {line}", file=sys.stderr, flush=True)


def sender(conn: socket.socket, key: str = "line") -> Callable[[str], None]:
    """What sends the run's driver a message of ``key``: a line of its ranks', or why it waits."""
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            try:
                handoff.send(conn, {key: line})
            except OSError:
                pass  # the driver is gone; its watcher cancels the run (or its turn finds it closed)

    return say


def closed(conn: socket.socket) -> bool:
    """Whether the run's driver has gone (it sends nothing after its request: any readable byte is EOF)."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snakeddp.spark.application", description=__doc__)
    helper.add_arguments(parser)
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--slots", type=int, required=True)
    parser.add_argument("--first", type=int, required=True)
    args = parser.parse_args(argv)
    listener = helper.listener(args)
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The signal wakes the loop at once (Snakemake waits for this process at the workflow's end).
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken)
    if not helper.tie_to_parent(args.parent):
        return 0  # Snakemake is gone already
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' Python: this venv's
    application = Application(args.scratch.resolve(), args.slots, args.first)
    try:
        while not stopping.is_set():
            ready, _, _ = select.select([listener, wake], [], [], WATCH_S)
            if listener not in ready:
                continue
            conn, _ = listener.accept()
            conn.setblocking(True)
            if helper.stranger(conn) is not None:
                conn.close()
                continue
            threading.Thread(target=application.serve, args=(conn,), daemon=True).start()
    finally:
        listener.close()
        application.stop()
        # Its executors' temporary files: also when Snakemake was killed and cannot remove them.
        shutil.rmtree(application.scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
