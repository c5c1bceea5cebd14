"""One Spark application per invocation: the spark profile's train jobs hand their runs to the workflow's
shared application (``snakeddp.spark.application``), which holds one session, instead of each starting
a driver JVM of its own (a 9-14 s session per run on a small cluster).

The workflow starts it before its first job (the spark contract's ``before_jobs``) and stops it at the
end (``close``). Where every run it will train asks for the same session (``expected``: the hello their
drivers will send, built as snakeddp.launch builds their command), it is told so at once and starts the
session, and the executors' Python, while the data and environment jobs run. It dies with Snakemake
(``kill -9`` included: its parent-death signal, and its JVM with it). Its socket is in a mode-0700
directory and it takes only its owner's connections, as the warm process does. A train job's driver
(``snakeddp.spark.driver``) connects, says what its run needs (``hello``), and is told the application,
or why it is declined (a run with other task cores, GPUs or Spark settings than the session's): then the
run starts an application of its own, as before. The run's ranks are one barrier stage, the run's job
group; its ranks' lines come back over the connection; closing the connection (the driver killed)
cancels the run's stage.

The wire is snakeddp.util.handoff's (length-prefixed JSON): ``{"expect": HELLO}`` from the workflow;
from a run, hello, then ``{"application": ...}``, ``{"declined": WHY}`` or ``{"failed": LINE}``; train,
then ``{"line": TEXT}``... and ``{"done": ERROR}``.
Light: the contract (read by every job's Snakefile) imports it.
"""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from snakeddp.config.parts import Launch, thaw
from snakeddp.forking.helper import Helper
from snakeddp.run import variables
from snakeddp.spark import SparkError
from snakeddp.spark.settings import Settings, from_environment
from snakeddp.util import handoff

#: The shared application's socket, set in Snakemake's environment (so in every train job's).
VARIABLE = "SNAKEDDP_SPARK_APPLICATION"
PREFIX = "snakeddp-spark-"
#: Its own log (the JVM's lines, and any of its errors), beside its scratch.
LOG = "spark-application.log"
#: How long stopping waits for it (it stops its session and JVM) before SIGKILL.
STOP_TIMEOUT_S = 20.0


class SharedApplication(Helper):
    """The invocation's shared application: ``start`` it, ``close`` it (also at exit); an owner-only helper
    process (snakeddp.forking.helper)."""

    def __init__(self) -> None:
        super().__init__(PREFIX, "application", STOP_TIMEOUT_S)
        self.scratch: Path | None = None

    def start(
        self,
        scratch: Path,
        slots: tuple[int, int],
        env: Mapping[str, str] | None = None,
        expect: Mapping[str, Any] | None = None,
    ) -> str:
        """Start it; its socket's path (VARIABLE's value for the jobs). ``scratch``: its executors' TMPDIR
        and spark.local.dir, where the executors see it (the checkout); ``slots``: the ranks of every run
        this invocation trains, which it asks the cluster for at most, and the smallest run's, which its
        session waits for (sharing.slots); ``expect``: the hello its runs will send (``expected``), with
        which it starts its session now."""
        self.scratch = scratch
        scratch.mkdir(parents=True, exist_ok=True)
        # Its JVM's and Spark's own lines are not the workflow's terminal's: they go to its log, kept
        # beside its scratch until the next invocation (a run's own lines go to the run's log).
        with open(scratch.parent / LOG, "wb") as log:
            args = [f"--scratch={scratch}", f"--slots={slots[0]}", f"--first={slots[1]}"]
            path = self.start_module("snakeddp.spark.application", args, env=env, stdout=log, stderr=log)
        if expect is not None:
            # Through the socket, not argv: the section's spark.conf may hold a secret. Queued like a job's.
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(path)
                handoff.send(sock, {"expect": dict(expect)})
        return path

    def close(self) -> None:
        super().close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


class Declined(Exception):
    """Why a run starts an application of its own (one clause)."""


class Client:
    """A train job's driver, connected to the shared application."""

    def __init__(self, sock: socket.socket, application: dict[str, Any]) -> None:
        self.sock = sock
        self.application = application  # id, master, source, session_s

    @classmethod
    def connect(cls, path: str, hello: Mapping[str, Any]) -> Client:
        """Raises Declined (the run goes alone) or SparkError (the shared session did not start: one line)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            handoff.send(sock, {"hello": dict(hello)})
            answer, _ = handoff.receive(sock)
        except (OSError, handoff.ProtocolError) as error:
            sock.close()
            raise Declined(f"the workflow's Spark application did not answer at {path} ({error})") from None
        if answer is None or "application" not in answer:
            sock.close()
            if answer is not None and "failed" in answer:
                raise SparkError(str(answer["failed"]))
            why = answer.get("declined") if answer else "the workflow's Spark application closed the connection"
            raise Declined(str(why))
        return cls(sock, dict(answer["application"]))

    def train(self, request: Mapping[str, Any], say: Callable[[str], None], waits: Callable[[str], None]) -> str | None:
        """Run the ranks in the shared application; each of their lines to ``say``, and to ``waits`` why the run
        waits for its turn where it does. What the Spark job ended with (its error's text), or None."""
        handoff.send(self.sock, {"train": dict(request)})
        while True:
            try:
                message, _ = handoff.receive(self.sock)
            except (OSError, handoff.ProtocolError) as error:
                return f"the workflow's Spark application stopped answering ({error})"
            if message is None:
                return "the workflow's Spark application ended while the run trained"
            if "line" in message:
                say(str(message["line"]))
            elif "waiting" in message:
                waits(str(message["waiting"]))
            elif "done" in message:
                done = message["done"]
                return None if done is None else str(done)

    def close(self) -> None:
        self.sock.close()


def hello(section: Settings, num_processes: int, threads: int, gpu: bool) -> dict[str, Any]:
    """What a run needs of the shared application: the same session (Spark settings, cores per task,
    GPUs); its ranks' number only decides when it may start."""
    return {"section": thaw(section), "num_processes": num_processes, "threads": threads, "gpu": gpu}


def session_key(hello: Mapping[str, Any]) -> str:
    """What runs must agree on to share one session: Spark settings, cores per task, GPUs."""
    return json.dumps([hello["section"], hello["threads"], hello["gpu"]], sort_keys=True)


def expected(launches: Sequence[Launch], env: Mapping[str, str]) -> dict[str, Any] | None:
    """The hello the runs of ``launches`` will send, where they agree on a session (the smallest run's
    ranks), read as their jobs read it: the platform's section from ``env``, and each run's cores per rank
    and accelerator as snakeddp.launch gives them to snakeddp.spark.driver. None where they differ: the
    first run to ask decides, as it does without this."""
    section = from_environment(env)
    hellos = [
        hello(
            section,
            launch.nodes * launch.devices,
            launch.threads_per_process,
            variables.accelerator(launch, env) == "gpu",
        )
        for launch in launches
    ]
    if len({session_key(each) for each in hellos}) != 1:
        return None
    return min(hellos, key=lambda each: each["num_processes"])


def slots(launches: Sequence[Any]) -> tuple[int, int]:
    """The ranks of the runs an invocation trains (what its shared application asks for at most), and the
    smallest run's (what its session waits for before it starts: a run too large for the cluster fails
    alone in its turn, not every run after a wait)."""
    ranks = [launch.nodes * launch.devices for launch in launches] or [1]
    return sum(ranks), min(ranks)
