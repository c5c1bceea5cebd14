"""A run's ranks as one barrier stage of the workflow's shared Spark application, without torchrun.

Each of the stage's tasks forks its rank from the task's Python worker, which the executor's daemon
(``snakeddp.spark.daemon``) forked with torch, Lightning and ``snakeddp.train`` imported: the rank
starts training at once. Under TorchDistributor each task ran torchrun's wrapper, torchrun (which
imports torch itself) and a rank that imported everything again (bench 12: 7.5 s from launch to the
rank's start, and 3.1 s of imports in the rank, against 0.7 s direct). A run's own application (a
Databricks job's, a run the shared one declines) still uses TorchDistributor (``session.distribute``).

What TorchDistributor gave each rank, this gives too: torchrun's variables for one process per task
(RANK, GROUP_RANK = the task, LOCAL_RANK 0, LOCAL_WORLD_SIZE 1, WORLD_SIZE, MASTER_ADDR and a free
MASTER_PORT on task 0's host, a rendezvous id), the task's GPUs as its CUDA_VISIBLE_DEVICES, and its
lines at the driver: sent to a line server of the run's own, which hands them to the run's driver. The
tasks meet at that server too: it answers each once every task has come and task 0 has offered its port.
Spark's own barrier (``allGather``) would do, but its task side looks for the answer once a second
(BarrierTaskContext.runBarrier's ``Thread.sleep(1000)``): a second of every run. Where a task cannot
reach the server, or they do not all come within MEET_S, the tasks meet through allGather. A rank dies
with its task's worker (killed when the stage is cancelled); where the worker cannot fork (it did not
import, runs threads, or SNAKEDDP_WARM_START=0 says so), the rank starts as a process of its own.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from snakeddp.cluster.supervisor import reserve_port
from snakeddp.cluster.warm import RANK_START, enabled
from snakeddp.forking.child import become, close_fds, detach, die_with_parent, fork
from snakeddp.forking.imports import IMPORTED_ENV
from snakeddp.forking.safety import NotForkable, check_forkable, open_fds
from snakeddp.spark.jobside import RDZV_ID, STAGE_ID
from snakeddp.spark.rank import executor_variables, placement
from snakeddp.spark.session import has_executors
from snakeddp.util import terminal

#: The executors' daemon, which imports what a rank imports before it forks the tasks' workers.
DAEMON_SETTING = "spark.python.daemon.module"
DAEMON = "snakeddp.spark.daemon"
#: The module a rank runs (as ``python -m``).
RANK = "snakeddp.spark.rank"
#: A fresh interpreter's handlers, which a forked rank gets back (pyspark's worker has set these).
HANDLERS = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
    signal.SIGHUP: signal.SIG_DFL,
    signal.SIGCHLD: signal.SIG_DFL,
    signal.SIGUSR1: signal.SIG_DFL,
}
# How long a task's line sender waits to reach the driver's line server.
CONNECT_S = 10.0
# How long the line server reads, once the stage has ended, what its tasks' ranks had still sent.
DRAIN_S = 10.0
# How long the tasks that came wait at the line server for the rest, from the first one's arrival: then
# every task, come or late, is told to meet through Spark's barrier (a task that cannot reach the driver
# goes there at once).
MEET_S = 10.0
#: The line server's answer that sends a task to Spark's barrier.
GATHER = "gather"


def distribute(context: Any, num_processes: int, gpu: bool, settings: Path, entry: Sequence[str],
               say: Callable[[str], None]) -> BaseException | None:  # fmt: skip
    """Run a run's ranks in ``context`` (a SparkContext), one barrier stage whose lines go to ``say``; the
    exception the Spark job ended with, if any (the driver judges the run by its records)."""
    host = context.getConf().get("spark.driver.host") or socket.gethostname()
    with LineServer(host, say, num_processes) as lines:
        plan = {
            "world_size": num_processes,
            "gpu": gpu,
            "settings": str(settings),
            "command": [sys.executable, "-m", RANK, "--settings", str(settings), "--", *entry],
            "lines": [host, lines.port, lines.token],
            # local[N] has no executors: its tasks share the driver's GPUs, one each, as TorchDistributor does.
            "driver_gpus": [] if not gpu or has_executors(context.master) else driver_gpus(context),
        }
        try:
            ended = (
                context.parallelize(range(num_processes), num_processes)
                .barrier()
                .mapPartitions(functools.partial(task, plan))
                .collect()
            )
        except Exception as error:  # Py4JJavaError: the stage failed, or was cancelled
            return error
    failed = [(rank, code) for rank, code in ended if code != 0]
    return RuntimeError(f"rank {failed[0][0]} exited with {failed[0][1]}") if failed else None


def driver_gpus(context: Any) -> list[str]:
    resources = context.resources
    if "gpu" in resources:
        return list(resources["gpu"].addresses)
    return [gpu for gpu in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if gpu.strip()]


class LineServer:
    """The run's lines from its tasks, handed to ``say`` one at a time, and where its tasks meet. A task
    connects, sends the token (the server listens on the network: a connection without it is dropped), a
    header (its rank, task 0's offered port and rendezvous id, its rank's placement line), waits for the
    meeting's answer, then sends its rank's lines. On the way out it reads to the end what its tasks
    sent: a stage that ended (a rank's failure cancels the others) may have lines still in flight, which
    the run's log must have before the run's end."""

    def __init__(self, host: str, say: Callable[[str], None], world_size: int = 1) -> None:
        self.say, self.lock = say, threading.Lock()
        self.token = secrets.token_hex(16)
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.readers: list[threading.Thread] = []
        self.world_size = world_size
        self.met = threading.Condition()
        self.meeting: Meeting | None = None
        self.closed = False

    def __enter__(self) -> LineServer:
        threading.Thread(target=self.accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        # shutdown wakes the accept thread (close alone leaves it, and the port, listening until one more
        # connection comes: in the shared application, one of each per run).
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self.met:
            self.closed = True  # a task still waiting is gone with its stage
            self.met.notify_all()
        # A task's connection ends with its worker, which Spark kills within its kill timeout (2 s) of a cancel.
        deadline = time.monotonic() + DRAIN_S
        for reader in list(self.readers):
            reader.join(max(0.0, deadline - time.monotonic()))

    def accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed: the stage has ended
            reader = threading.Thread(target=self.read, args=(conn,), daemon=True)
            self.readers.append(reader)
            reader.start()

    def read(self, conn: socket.socket) -> None:
        with conn, conn.makefile("r", errors="replace") as lines:
            if lines.readline().strip() != self.token:
                return
            try:
                header = json.loads(lines.readline())
                rank, offer = int(header["rank"]), str(header["offer"])
            except (ValueError, KeyError, TypeError):
                return
            if header.get("placement"):
                with self.lock:
                    self.say(str(header["placement"]))
            try:
                conn.sendall(f"{self.meet(rank, offer)}\n".encode())
            except OSError:
                return
            for line in lines:
                with self.lock:
                    self.say(line.rstrip("\n"))

    def meet(self, rank: int, offer: str) -> str:
        """Task ``rank``'s answer: task 0's offer once every task has come (each has sent its placement
        line, so the run's log has them all before any rank starts), or GATHER. One meeting per server: a
        barrier stage that collects is not retried (Spark: "Could not recover from a failed barrier
        ResultStage"), and each run's stage has a server of its own."""
        with self.met:
            meeting = self.meeting = self.meeting or Meeting(time.monotonic() + MEET_S)
            meeting.come.add(rank)
            if rank == 0 and offer:
                meeting.offer = offer
            if meeting.answer is None and len(meeting.come) == self.world_size and meeting.offer:
                meeting.answer = meeting.offer
                self.met.notify_all()
            while meeting.answer is None and not self.closed:
                left = meeting.deadline - time.monotonic()
                if left <= 0:
                    meeting.answer = GATHER
                    self.met.notify_all()
                    break
                self.met.wait(left)
            return meeting.answer or GATHER


class Meeting:
    """A run's tasks at its line server: who came, task 0's offer, and the answer once there is one."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.come: set[int] = set()
        self.offer: str | None = None
        self.answer: str | None = None


def task(plan: dict[str, Any], _partition: Iterable[int]) -> Iterator[tuple[int, int]]:
    """One rank, in its barrier task (run by the executor's Python worker): its exit status."""
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    rank = context.partitionId()
    host = context.getTaskInfos()[0].address.split(":")[0]
    gpus = ",".join(plan["driver_gpus"][rank : rank + 1]) if plan["driver_gpus"] else task_gpus(context, plan["gpu"])
    executor = executor_variables()
    with LineSender(*plan["lines"]) as lines:
        # Task 0 holds rank 0's port until its rank ends (the supervisor's way: found free and let go, it
        # would be anyone's until rank 0's store listens on it).
        with reserve_port() if rank == 0 else contextlib.nullcontext() as held:
            offer = f"{held.getsockname()[1]} {secrets.token_hex(16)}" if held else ""
            # Every rank's placement is at the driver before any rank starts (a rank forked warm fails its
            # first check in a fraction of a second; the run's log then takes only the failure's one line).
            agreed = lines.meet(rank, offer, placement(rank, executor, gpus))
            port, run_id = (agreed or context.allGather(offer)[0]).split()
            env = {**os.environ, **rank_environment(rank, plan["world_size"], host, port, run_id), **executor}
            env.update({"CUDA_VISIBLE_DEVICES": gpus, STAGE_ID: str(context.stageId())})
            env[terminal.VARIABLE] = terminal.THROUGH_DRIVER  # its lines reach the driver's terminal through it
            code = start_rank(plan["command"], env, Path(plan["settings"]), lines)
    yield rank, code


def task_gpus(context: Any, gpu: bool) -> str:
    """The GPUs Spark gave the task, as CUDA_VISIBLE_DEVICES ("" for a CPU run: it sees none)."""
    return ",".join(context.resources()["gpu"].addresses) if gpu else ""


def rank_environment(rank: int, world_size: int, master: str, port: str, run_id: str) -> dict[str, str]:
    """torchrun's variables for one process per node (``--nnodes=world_size --node_rank=rank``), and
    TorchDistributor's rendezvous id, which tells snakeddp's launcher table the ranks are Spark's."""
    return {
        "RANK": str(rank),
        "GROUP_RANK": str(rank),
        "ROLE_RANK": str(rank),
        "NODE_RANK": str(rank),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "WORLD_SIZE": str(world_size),
        "GROUP_WORLD_SIZE": str(world_size),
        "ROLE_WORLD_SIZE": str(world_size),
        "ROLE_NAME": "default",
        "MASTER_ADDR": master,
        "MASTER_PORT": port,
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        RDZV_ID: run_id,
    }


class LineSender:
    """A task's line to the run's line server; where the driver cannot be reached, the executor's stderr."""

    def __init__(self, host: str, port: int, token: str) -> None:
        try:
            self.conn: socket.socket | None = socket.create_connection((host, port), timeout=CONNECT_S)
            self.conn.settimeout(None)
            self.conn.sendall(f"{token}\n".encode())
        except OSError:
            self.conn = None

    def __enter__(self) -> LineSender:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None:
            self.conn.close()

    def meet(self, rank: int, offer: str, placed: str | None) -> str | None:
        """The meeting's answer at the line server ("port run_id"), with the rank's placement line; None
        where the tasks meet through Spark's barrier instead (unreached, the placement line goes first)."""
        header = {"rank": rank, "offer": offer, "placement": placed}
        answer = self.ask(f"{json.dumps(header)}\n".encode())
        if answer is None and placed:
            self.send(f"{placed}\n".encode())
        return None if answer in (None, GATHER) else answer

    def ask(self, message: bytes) -> str | None:
        """The server's one-line answer to ``message``; None where it cannot be reached (lines then go to
        the executor's stderr)."""
        if self.conn is None:
            return None
        answer = b""
        try:
            self.conn.sendall(message)
            while not answer.endswith(b"\n"):
                chunk = self.conn.recv(256)
                if not chunk:
                    raise ConnectionError("the line server closed")
                answer += chunk
        except OSError:
            self.conn = None
            return None
        return answer.decode().strip()

    def send(self, line: bytes) -> None:
        if self.conn is not None:
            try:
                self.conn.sendall(line)
                return
            except OSError:
                self.conn = None
        sys.stderr.buffer.write(line)
        sys.stderr.flush()


def start_rank(command: list[str], env: dict[str, str], settings: Path, lines: LineSender) -> int:
    """The rank's process, forked from this worker where it can be, else a fresh one: its exit status once its
    output (stdout and stderr, one pipe) has ended."""
    read, write = os.pipe()
    try:
        pid = fork_rank(command, env, settings, (read, write))
    except NotForkable as why:
        lines.send(f"snakeddp.spark: rank {env['RANK']} starts as a process of its own: {why}\n".encode())
        pid = None
    if pid is None:
        process = subprocess.Popen(
            command, env={**env, RANK_START: "cold"}, stdin=subprocess.DEVNULL, stdout=write, stderr=write,
            start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        pid = process.pid
    os.close(write)
    with os.fdopen(read, "rb") as output:
        for line in output:
            lines.send(line)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def fork_rank(command: list[str], env: dict[str, str], settings: Path, pipe: tuple[int, int]) -> int | None:
    """The rank forked from this worker (None where SNAKEDDP_WARM_START=0 asks for fresh ranks, or the
    worker did not import what the rank needs)."""
    chosen = json.loads(settings.read_text(encoding="utf-8"))["env"]
    if not enabled(chosen) or "snakeddp.train" not in sys.modules:
        return None
    check_forkable(open_fds(), RANK)
    return fork(lambda worker: become_rank(command, env, pipe, worker), HANDLERS)


def become_rank(command: list[str], env: dict[str, str], pipe: tuple[int, int], worker: int) -> int:
    """The forked child: dies with the task's worker (which Spark kills when it cancels the stage), its
    output into the pipe, then a fresh ``python -m snakeddp.spark.rank``."""
    detach(worker, HANDLERS, HANDLERS)
    read, write = pipe
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (write, 1), (write, 2)):
        os.dup2(fd, target)
    for fd in (null, read, write):
        os.close(fd)
    close_fds()  # the worker's sockets to the executor: a rank never holds them
    # The locale's encoding, as the streams they replace had: a pipe to the executor's log.
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: PLW1514
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: PLW1514
    return become(command, {**IMPORTED_ENV, **env, RANK_START: "warm"})
