"""What both warm processes are: one thread and a ``selectors`` loop that serves every job at once (each
job's connection, closed early: its client was killed, so the job is too; each job's pidfd, readable:
the job ended, its status goes back to its client) while it imports one module per turn; it forks the
jobs (snakeddp.forking), parks those that wait for an import, and stops them all when it stops. Where
its jobs come from is its role's: the front warm process, which owns the socket (snakeddp.warm.front), or the
heavy one, which imports what takes seconds (snakeddp.warm.heavy).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import time
from typing import Any, NoReturn

from snakeddp.forking import helper
from snakeddp.forking.child import become, detach, fork
from snakeddp.forking.safety import NotForkable, check_forkable
from snakeddp.warm.admission import Declined
from snakeddp.warm.importing import Imports, Stopping
from snakeddp.warm.jobs import Job, announce, answer, command, drop, kill, place
from snakeddp.warm.process import HINT

#: What the server handles itself (a job gets a fresh interpreter's handlers back).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: How long a job of a stopping workflow has to save and exit before SIGKILL.
STOP_GRACE_S = 5.0


class Server:
    """One warm process: its loop, its imports, its jobs (forked, or parked until an import is done)."""

    def __init__(self, parent: int, handlers: dict[int, Any], imports: Imports) -> None:
        self.parent = parent  # this process ends when its parent does
        self.handlers = handlers  # a fresh interpreter's, for every job
        self.imports = imports
        self.jobs: dict[int, Job] = {}  # by pidfd
        self.parked: dict[socket.socket, tuple[dict[str, Any], list[int]]] = {}  # waiting for NEEDS
        self.said: set[str] = set()
        self.stopping = False  # nothing more is taken, forwarded or marked
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    # What the role adds: where its jobs come from, and what it holds.
    def listen(self) -> None:
        """Watch where this process's jobs come from."""
        raise NotImplementedError

    def handle(self, tag: str, events: int) -> None:
        """Something came where the role listens."""
        raise NotImplementedError

    def held(self) -> set[int]:
        """The role's own descriptors (no stray ones: check_forkable)."""
        raise NotImplementedError

    def release(self) -> None:
        """In a forked job: close the role's own descriptors."""
        raise NotImplementedError

    def say_imported(self) -> None:
        """Everything is imported."""
        raise NotImplementedError

    def stop_taking(self) -> None:
        """Stopping: take no more jobs."""
        raise NotImplementedError

    def stop_heavy(self, late: float) -> bool:
        """Stopping, ``late`` seconds past the jobs' grace: the front one stops the heavy warm process too;
        whether one still runs."""
        return False

    def own_fds(self) -> set[int]:
        return {
            *self.held(),
            self.selector.fileno(),
            self.wake_r,
            self.wake_w,
            *(job.conn.fileno() for job in self.jobs.values()),
            *self.jobs,
            *(conn.fileno() for conn in self.parked),
            *(fd for _, fds in self.parked.values() for fd in fds),
        }

    def say(self, line: str) -> None:
        """One line on the workflow's terminal (this process's stderr is Snakemake's), once."""
        if line not in self.said:
            self.said.add(line)
            os.write(2, f"{line}\n".encode(errors="replace"))

    # The loop.
    def serve(self) -> NoReturn:
        """Serve jobs until stopped, importing one module per turn of the loop, so no job waits for more
        than one import."""
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        for signum in STOP_SIGNALS:
            signal.signal(signum, self.imports.on_stop_signal)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by main() until the wake-up fd is set
        self.listen()
        self.selector.register(self.wake_r, selectors.EVENT_READ, "signal")
        while True:
            for key, events in self.selector.select(timeout=0 if self.imports.due() else 1.0):
                if key.data == "signal":
                    self.stop()
                elif key.data == "exit":
                    self.reap(key.fd)
                elif key.data == "parked":
                    self.unpark(key.fileobj, gone=True)
                elif isinstance(key.data, Job):
                    self.client_gone(key.data)
                else:
                    self.handle(key.data, events)
            if os.getppid() != self.parent:  # its parent died before the kernel's signal could tell
                self.stop()
            if self.imports.due():
                try:
                    self.imports.warm_up()
                except Stopping:
                    self.stop()
                for conn, (request, _) in list(self.parked.items()):
                    if not self.imports.must_wait(request):
                        self.unpark(conn)
                if not self.imports.pending:
                    self.say_imported()

    def take(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """A checked job: parked until its import is done, or started."""
        if self.imports.must_wait(request):
            self.park(conn, request, fds)
        else:
            self.start(conn, request, fds)

    def park(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """Until its import is done; its client going away is seen meanwhile."""
        conn.setblocking(False)
        self.parked[conn] = (request, fds)
        self.selector.register(conn, selectors.EVENT_READ, "parked")

    def unpark(self, conn: socket.socket, gone: bool = False) -> None:
        """A parked job's import is done (start it), or its client went away (``gone``: forget it)."""
        request, fds = self.parked.pop(conn)
        self.selector.unregister(conn)
        if gone:
            drop(conn, fds)
            return
        conn.setblocking(True)
        self.start(conn, request, fds)

    # The jobs.
    def start(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """Fork a checked request's job, if this process can fork now (checked here, by whichever process
        forks it, at the moment it does: an import since the request came may have made it unforkable)."""
        try:
            self.check_fork(fds, conn)
            pid = fork(lambda server: self.become(request, fds, conn, server), STOP_SIGNALS)
            pidfd = os.pidfd_open(pid)
        except (Declined, OSError) as why:
            self.refuse(conn, fds, why)
            return
        for fd in fds:  # the job's now
            os.close(fd)
        conn.setblocking(False)
        self.jobs[pidfd] = Job(conn, pid, pidfd)
        self.selector.register(pidfd, selectors.EVENT_READ, "exit")
        self.selector.register(conn, selectors.EVENT_READ, self.jobs[pidfd])

    def refuse(self, conn: socket.socket, fds: list[int], why: Exception) -> None:
        """The job starts cold: declined (said once, with why), or its request could not be read."""
        if isinstance(why, Declined):
            self.say(f"snakeddp: a job starts cold: {why}. {HINT}")
            with contextlib.suppress(OSError):
                answer(conn, {"declined": str(why)})
        else:
            self.say(f"snakeddp: the warm process dropped a job's request ({why}); that job starts cold.")
        drop(conn, fds)

    def check_fork(self, fds: list[int], conn: socket.socket) -> None:
        """Decline a job when this process cannot fork safely: an import failed, or left a thread or an
        open descriptor behind."""
        if self.imports.ready is not None:
            raise Declined(self.imports.ready)
        try:
            check_forkable(self.own_fds() | set(fds) | {conn.fileno()}, "the steps' modules")
        except NotForkable as why:
            self.imports.ready = str(why)
            raise Declined(why) from None

    def become(self, request: dict[str, Any], fds: list[int], conn: socket.socket, server: int) -> int:
        """The child: the job's ``python -m MODULE ARGS``; its exit status."""
        # Its own session: its client passes on what a terminal or Snakemake sends, so nothing reaches it twice.
        detach(server, self.handlers, STOP_SIGNALS)
        # The child, not the server, tells the client it runs, before it runs anything: a server killed
        # after the fork (before it could answer) would leave the client to run the job a second time, cold.
        try:
            announce(conn)
        except OSError:
            return 1  # its client is gone (killed): the job is too, before it began
        conn.close()
        for job in self.jobs.values():
            job.conn.close()
            os.close(job.pidfd)
        for parked, (_, held) in self.parked.items():  # other jobs' requests, waiting for an import
            parked.close()
            for fd in held:
                os.close(fd)
        self.release()
        self.selector.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        place(request, fds)
        return become(command(request), request["env"])

    def client_gone(self, job: Job) -> None:
        """The job's connection is readable: it says nothing more, so its client is gone (killed)."""
        try:
            data = job.conn.recv(1)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.selector.unregister(job.conn)
            kill(job.pid, signal.SIGKILL)  # as the job would have died with its process

    def reap(self, pidfd: int) -> None:
        job = self.jobs.pop(pidfd)
        _, status = os.waitpid(job.pid, 0)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        self.forget(job.conn)
        job.conn.setblocking(True)
        answer(job.conn, {"status": status})  # nobody reads it when the client went first
        job.conn.close()

    def forget(self, conn: socket.socket) -> None:
        """Stop watching a job's connection (unwatched already when its client went first)."""
        with contextlib.suppress(KeyError):
            self.selector.unregister(conn)

    def stop(self) -> NoReturn:
        """Snakemake is done or gone (for the heavy warm process: the front one is): every running job gets
        SIGTERM, SIGKILL after the grace, and so does the heavy one, which stops its jobs the same way; then exit."""
        self.stopping = True
        self.stop_taking()
        for conn in list(self.parked):
            self.unpark(conn, gone=True)
        for job in self.jobs.values():
            self.forget(job.conn)  # only their exits matter now
            kill(job.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        jobs_killed = False
        while True:
            late = time.monotonic() - deadline
            if late > 0 and not jobs_killed:
                for job in self.jobs.values():
                    kill(job.pid, signal.SIGKILL)
                jobs_killed = True
            if not self.stop_heavy(late) and not self.jobs:
                break
            for key, events in self.selector.select(timeout=0.1):
                if key.data == "exit":
                    self.reap(key.fd)
                elif key.data == "signal":
                    drain(self.wake_r)
                else:
                    self.handle(key.data, events)
        os._exit(0)


def drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def die_with(parent: int) -> None:
    """SIGTERM (a graceful stop) when ``parent`` dies (Snakemake for the front warm process, the front one
    for the heavy one); at once if it already has. Where the kernel cannot tell, the loop's parent check
    sees it within a second."""
    if not helper.tie_to_parent(parent):
        os._exit(0)
