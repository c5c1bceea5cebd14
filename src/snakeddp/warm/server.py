"""The workflow's warm process: ``python -m snakeddp.warm.server --fd N --parent PID``.

Started by Snakemake's process when a local workflow starts (``snakeddp.warm.process``), it forks
every step a job hands it (``snakeddp.util.handoff``), while it imports what the steps import (numpy,
snakeddp) one module at a time between the jobs. What takes seconds to import (torch, Lightning, the
report's matplotlib: ``preload.SLOW``) a second warm process imports, forked from the first before
either imports anything: the first forwards it the jobs that need it (``preload.NEEDS``: a train job's
supervisor, the report), so no data or record job ever waits for torch's import. In each, one thread
and a ``selectors`` loop serve every job at once: the listening socket (the second: the channel from
the first), each job's connection (closed early: its client was killed, so the job is too) and each
job's pidfd (readable: the job ended; its status goes back to its client).

Only its owner can use it: the socket lies in a directory of mode 0700, the peer's uid is checked
with SO_PEERCRED, only the workflow's own steps (``handoff.ENTRY_POINTS``) are run, and a request
is taken only for what the job's own command line would have set anyway (its arguments,
environment, working directory, umask, limits, stdio), for the same interpreter, flags and import
path as this process's: anything else is declined and the job starts cold.

It goes away with Snakemake: asked to (SIGTERM), or when Snakemake dies (PR_SET_PDEATHSIG, and its
parent's pid checked every second); the second goes away with the first the same way. Jobs still
running then get SIGTERM, and SIGKILL after ``STOP_GRACE_S``, as a job of a killed scheduler should:
nothing is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import io
import os
import resource
import selectors
import shutil
import signal
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from snakeddp.cluster import warm
from snakeddp.cluster.lifecycle import PR_SET_PDEATHSIG
from snakeddp.util import handoff
from snakeddp.warm.preload import ALL, NEEDS, OPTIONAL, SLOW
from snakeddp.warm.process import HINT, IMPORTED, PREFIX

#: What the server handles itself (a job gets a fresh interpreter's handlers back).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: How long a job of a stopping workflow has to save and exit before SIGKILL.
STOP_GRACE_S = 5.0
#: How long a connected client may take to send its request.
REQUEST_TIMEOUT_S = 5.0
#: Environment variables read when an interpreter starts: a job whose differ would not be this interpreter.
STARTUP_PREFIXES = ("PYTHON",)
STARTUP_NAMES = ("LC_ALL", "LC_CTYPE", "LANG")
#: All the second warm process ever says to the first: it has imported everything. One byte, which
#: cannot arrive in pieces on the first's non-blocking read; the channel's end says the second is gone.
SAID_IMPORTED = b"i"


class Declined(Exception):
    """Why a job starts cold: one clause, said once on the workflow's terminal."""


class Stopping(BaseException):
    """A stop signal that came during an import, raised out of it: the loop would see the signal only
    after the import, and Lightning's takes 1-2 s, which a short workflow's Snakemake waited at its exit."""


@dataclass
class Job:
    conn: socket.socket
    pid: int
    pidfd: int


@dataclass
class Forward:
    """A job on its way to the second warm process: its connection and descriptors stay here until the
    whole request has gone (the channel takes what it can; the rest goes when it is writable)."""

    conn: socket.socket
    request: dict[str, Any]
    fds: list[int]
    unsent: bytes
    started: bool = False  # its descriptors went with the first bytes


@dataclass
class Second:
    """The first warm process's view of the second: its pid, the channel jobs go over, what it imports."""

    pid: int
    channel: socket.socket  # non-blocking: the first never waits for the second
    modules: frozenset[str]
    imported: bool = False  # it said it has imported all of ``modules``
    outbox: deque[Forward] = field(default_factory=deque)


@dataclass
class Server:
    listener: socket.socket | None  # None in the second warm process, whose jobs come over ``inbox``
    parent: int
    handlers: dict[int, Any]
    entries: tuple[str, ...] = handoff.ENTRY_POINTS
    home: str = ""  # the warm process's directory (mode 0700), which holds its socket
    second: Second | None = None  # the first's: the second warm process, while it runs
    inbox: socket.socket | None = None  # the second's: the channel from the first
    ready: str | None = None  # why nothing more is forked (an import or a fork check failed), else None
    jobs: dict[int, Job] = field(default_factory=dict)  # by pidfd
    said: set[str] = field(default_factory=set)
    needs: dict[str, str] = field(default_factory=lambda: dict(NEEDS))
    pending: list[str] = field(default_factory=list)  # what is still to import, in order
    parked: dict[socket.socket, tuple[dict[str, Any], list[int]]] = field(default_factory=dict)  # waiting for NEEDS
    importing: bool = False  # inside warm_up's import: a stop signal raises Stopping there

    def __post_init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.startup_env = startup_env(os.environ)

    def own_fds(self) -> set[int]:
        second = self.second
        return {
            *(sock.fileno() for sock in (self.listener, self.inbox) if sock is not None),
            *((second.channel.fileno(),) if second else ()),
            *(fd for forward in (second.outbox if second else ()) for fd in (forward.conn.fileno(), *forward.fds)),
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
    def serve(self, preload: Sequence[str] = (), optional: frozenset[str] = frozenset()) -> None:
        """Serve jobs until stopped, importing ``preload`` (of it, ``optional`` modules where installed)
        one module per turn of the loop, so no job waits for more than one import."""
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        for signum in STOP_SIGNALS:
            signal.signal(signum, self.on_stop_signal)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by main() until the wake-up fd is set
        if self.listener is not None:
            self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        if self.inbox is not None:
            self.selector.register(self.inbox, selectors.EVENT_READ, "inbox")
        if self.second is not None:
            self.selector.register(self.second.channel, selectors.EVENT_READ, "second")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "signal")
        self.pending = [m for m in preload if m not in optional or importlib.util.find_spec(m) is not None]
        required = set(preload) - optional
        while True:
            for key, events in self.selector.select(timeout=0 if self.pending and self.ready is None else 1.0):
                if key.data == "accept":
                    self.accept()
                elif key.data == "inbox":
                    self.take_forwarded()
                elif key.data == "second":
                    self.hear_second(events)
                elif key.data == "signal":
                    self.stop()
                elif key.data == "exit":
                    self.reap(key.fd)
                elif key.data == "parked":
                    self.unpark(key.fileobj, gone=True)
                else:
                    self.client_gone(key.data)
            if os.getppid() != self.parent:  # its parent died before the kernel's signal could tell
                self.stop()
            if self.pending and self.ready is None:
                try:
                    self.warm_up(self.pending.pop(0), required)
                except Stopping:
                    self.stop()
                for conn, (request, _) in list(self.parked.items()):
                    if not self.must_wait(request):
                        self.unpark(conn)
                if not self.pending:
                    self.say_imported()

    def say_imported(self) -> None:
        """Everything is imported: the second tells the first, which marks it once both are done, or once
        the second is gone (for whoever waits for it: snakeddp.warm.process.WarmProcess.imported)."""
        if self.inbox is not None:
            with contextlib.suppress(OSError):
                self.inbox.send(SAID_IMPORTED)
        elif self.listener is not None and not self.pending and (self.second is None or self.second.imported):
            open(os.path.join(self.home, IMPORTED), "w").close()

    def warm_up(self, module: str, required: set[str]) -> None:
        """Import one more module; a required one that fails leaves every later job cold."""
        self.importing = True
        try:
            warm.import_once([module], entries=handoff.ENTRY_POINTS)
        except warm.NotForkable as why:
            if module in required:
                self.ready = str(why)
        finally:
            self.importing = False

    def on_stop_signal(self, signum: int, frame: object) -> None:
        """Between imports the wake-up fd tells the loop; during one, the import ends here."""
        if self.importing:
            self.importing = False
            raise Stopping

    def need(self, request: dict[str, Any]) -> str | None:
        """What the job's step imports first thing, if it is preloaded (NEEDS: by step, or by module)."""
        module, argv = request["module"], request["argv"]
        return self.needs.get(f"{module} {argv[0]}" if argv else module) or self.needs.get(module)

    def must_wait(self, request: dict[str, Any]) -> bool:
        """Whether the job would import what this process is still to import (NEEDS)."""
        return self.ready is None and self.need(request) in self.pending

    def for_second(self, request: dict[str, Any]) -> bool:
        """Whether the second warm process forks the job: its step needs what that one imports."""
        return self.second is not None and self.need(request) in self.second.modules

    # The channel between the two warm processes.
    def forward(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """Hand a checked job to the second warm process (which checks that it can fork when it does)."""
        assert self.second is not None
        self.second.outbox.append(Forward(conn, request, fds, handoff.frame({"request": request})))
        self.flush()

    def flush(self) -> None:
        """Send what the channel takes now; a job whose request has gone is the second's."""
        second = self.second
        assert second is not None
        while second.outbox:
            forward = second.outbox[0]
            try:
                if forward.started:
                    sent = second.channel.send(forward.unsent)
                else:
                    sent = socket.send_fds(second.channel, [forward.unsent], [forward.conn.fileno(), *forward.fds])
                    forward.started = True
            except BlockingIOError:
                break
            except OSError:
                self.second_gone()
                return
            forward.unsent = forward.unsent[sent:]
            if forward.unsent:
                break
            second.outbox.popleft()
            drop(forward.conn, forward.fds)  # the second holds its own copies
        writable = selectors.EVENT_WRITE if second.outbox else 0
        self.selector.modify(second.channel, selectors.EVENT_READ | writable, "second")

    def hear_second(self, events: int) -> None:
        """The channel is writable (send more), or readable: the second has imported all, or is gone."""
        if events & selectors.EVENT_WRITE:
            self.flush()
        if self.second is None or not events & selectors.EVENT_READ:
            return
        try:
            said = self.second.channel.recv(1)
        except BlockingIOError:
            return
        except OSError:
            said = b""
        if not said:
            self.second_gone()
        elif said == SAID_IMPORTED:
            self.second.imported = True
            self.say_imported()

    def second_gone(self) -> None:
        """The second warm process ended (killed, or stopping): reap it; what it had not taken yet is
        forked here, as if there were no second."""
        second, self.second = self.second, None
        assert second is not None
        self.selector.unregister(second.channel)
        second.channel.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(second.pid, 0)
        if self.listener is not None:  # not stopping
            for forward in second.outbox:
                forward.conn.setblocking(True)
                self.start(forward.conn, forward.request, forward.fds)
            self.say_imported()  # all this process will import: whoever waits for the marker need wait no more

    def take_forwarded(self) -> None:
        """The second warm process: a job from the first (its connection comes first), or the first is gone."""
        assert self.inbox is not None
        try:
            message, fds = handoff.receive(self.inbox, max_fds=1 + len(handoff.DESCRIPTORS))
        except (OSError, handoff.ProtocolError):
            message, fds = None, []
        if message is None or not fds:
            for fd in fds:
                os.close(fd)
            self.stop()
        conn = socket.socket(fileno=fds[0])
        conn.setblocking(True)
        request = message["request"]
        if self.must_wait(request):
            self.park(conn, request, fds[1:])
        else:
            self.start(conn, request, fds[1:])

    def unpark(self, conn: socket.socket, gone: bool = False) -> None:
        """A parked job's import is done (start it), or its client went away (``gone``: forget it)."""
        request, fds = self.parked.pop(conn)
        self.selector.unregister(conn)
        if gone:
            drop(conn, fds)
            return
        conn.setblocking(True)
        self.start(conn, request, fds)

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            uid = peer_uid(conn)
            if uid != os.getuid():
                self.say(f"snakeddp: the warm process refused a connection from uid {uid}: it serves only its owner.")
                conn.close()
                return
            conn.settimeout(REQUEST_TIMEOUT_S)
            request, fds = handoff.receive(conn, max_fds=len(handoff.DESCRIPTORS))
            if request is None:
                raise Declined("the job sent no request")
            self.check_request(request, fds)
        except (Declined, OSError, handoff.ProtocolError) as why:
            self.refuse(conn, fds, why)
            return
        if self.for_second(request):
            self.forward(conn, request, fds)
        elif self.must_wait(request):
            self.park(conn, request, fds)
        else:
            self.start(conn, request, fds)

    def park(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """Until its import is done; its client going away is seen meanwhile."""
        conn.setblocking(False)
        self.parked[conn] = (request, fds)
        self.selector.register(conn, selectors.EVENT_READ, "parked")

    def start(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """Fork a checked request's job, if this process can fork now (checked here, by whichever process
        forks it, at the moment it does: an import since the request came may have made it unforkable)."""
        try:
            self.check_fork(fds, conn)
            pid, pidfd = self.fork(request, fds, conn)
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

    def check_request(self, request: dict[str, Any], fds: list[int]) -> None:
        """Decline what a warm process would not be, or may not run (the first checks; the second is its
        fork, with the same interpreter, flags, path and limits)."""
        module = request.get("module")
        if module not in self.entries:
            raise Declined(f"{str(module)[:80]!r} is not a step of the workflow")
        shape = {
            "argv": list,
            "env": dict,
            "cwd": str,
            "umask": int,
            "rlimits": dict,
            "stdio": list,
            "executable": str,
            "flags": list,
            "path": list,
            "warnoptions": list,
        }
        for key, kind in shape.items():
            if not isinstance(request.get(key), kind):
                raise Declined(f"its request's {key} is not a {kind.__name__}")
        if not all(isinstance(a, str) for a in request["argv"]) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items()
        ):
            raise Declined("its arguments or environment are not strings")
        if len(fds) != sum(map(bool, request["stdio"])) + 1 or len(request["stdio"]) != 3:
            raise Declined("its request did not carry its stdio and working directory")
        try:
            same = os.path.samefile(request["executable"], sys.executable)
        except OSError:
            same = False
        if not same:
            raise Declined(f"it runs another interpreter ({request['executable']}, not {sys.executable})")
        if request["flags"] != list(sys.flags) or request["warnoptions"] != sys.warnoptions:
            raise Declined("its interpreter runs with other flags (-X, -W, -O, -I ...)")
        if request["path"] != sys.path[1:]:
            raise Declined("its import path differs from the workflow's (PYTHONPATH, a .pth file)")
        if startup_env(request["env"]) != self.startup_env:
            raise Declined("its PYTHON* or locale variables differ from the workflow's")
        for name, (soft, hard) in request["rlimits"].items():
            limit = getattr(resource, name, None)
            if not name.startswith("RLIMIT_") or limit is None:
                raise Declined(f"its request names an unknown limit {name[:40]!r}")
            if not _within(hard, resource.getrlimit(limit)[1]) or not _within(soft, hard):
                raise Declined(f"its {name} ({soft}, {hard}) is above the warm process's")

    def check_fork(self, fds: list[int], conn: socket.socket) -> None:
        """Decline a job when this process cannot fork safely: an import failed, or left a thread or an
        open descriptor behind."""
        if self.ready is not None:
            raise Declined(self.ready)
        try:
            warm.check_forkable(self.own_fds() | set(fds) | {conn.fileno()}, "the steps' modules")
        except warm.NotForkable as why:
            self.ready = str(why)
            raise Declined(why) from None

    def fork(self, request: dict[str, Any], fds: list[int], conn: socket.socket) -> tuple[int, int]:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            self.become(request, fds, conn, server)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        return pid, os.pidfd_open(pid)

    def become(self, request: dict[str, Any], fds: list[int], conn: socket.socket, server: int) -> None:
        """The child: the job's ``python -m MODULE ARGS``; never returns."""
        code = 1
        try:
            # Its own session: its client passes on what a terminal or Snakemake sends, so nothing reaches it twice.
            warm.detach(server, self.handlers, STOP_SIGNALS)
            # The child, not the server, tells the client it runs, before it runs anything: a server killed
            # after the fork (before it could answer) would leave the client to run the job a second time, cold.
            try:
                announce(conn)
            except OSError:
                return  # its client is gone (killed): the job is too, before it began
            conn.close()
            for job in self.jobs.values():
                job.conn.close()
                os.close(job.pidfd)
            for parked, (_, held) in self.parked.items():  # other jobs' requests, waiting for an import
                parked.close()
                for fd in held:
                    os.close(fd)
            if self.second is not None:
                self.second.channel.close()
                for forward in self.second.outbox:
                    drop(forward.conn, forward.fds)
            for sock in (self.listener, self.inbox):
                if sock is not None:
                    sock.close()
            self.selector.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            place(request, fds)
            code = warm.run(request["module"])
        except BaseException:  # never back into the server's loop: this process is the job now
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)

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
            _kill(job.pid, signal.SIGKILL)  # as the job would have died with its process

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
        """Snakemake is done or gone (for the second warm process: the first is): every running job gets
        SIGTERM, SIGKILL after the grace, and so does the second, which stops its jobs the same way; then exit."""
        for sock in (self.listener, self.inbox):
            if sock is not None:
                self.selector.unregister(sock)
                sock.close()
        # Its directory (snakeddp.warm.process made it): gone with the first, also when Snakemake was killed.
        if self.listener is not None and os.path.basename(self.home).startswith(PREFIX):
            shutil.rmtree(self.home, ignore_errors=True)
        self.listener = self.inbox = None  # stopping: nothing more is taken or marked
        for conn in list(self.parked):
            self.unpark(conn, gone=True)
        for job in self.jobs.values():
            self.forget(job.conn)  # only their exits matter now
            _kill(job.pid, signal.SIGTERM)
        if self.second is not None:
            for forward in self.second.outbox:
                drop(forward.conn, forward.fds)
            self.second.outbox.clear()
            _kill(self.second.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        jobs_killed = second_killed = False
        while self.jobs or self.second is not None:
            late = time.monotonic() - deadline
            if late > 0 and not jobs_killed:
                for job in self.jobs.values():
                    _kill(job.pid, signal.SIGKILL)
                jobs_killed = True
            if late > 1.0 and self.second is not None and not second_killed:  # its own grace is over too
                _kill(self.second.pid, signal.SIGKILL)
                second_killed = True
            for key, events in self.selector.select(timeout=0.1):
                if key.data == "exit":
                    self.reap(key.fd)
                elif key.data == "second":
                    self.hear_second(events)
                elif key.data == "signal":
                    _drain(self.wake_r)
        os._exit(0)


def drop(conn: socket.socket, fds: list[int]) -> None:
    """Close a job's connection and the descriptors it sent (the job runs cold, or is gone)."""
    conn.close()
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


def place(request: dict[str, Any], fds: list[int]) -> None:
    """Give this process the job's stdio, directory, umask, limits, environment and argv."""
    received = iter(fds)
    for target, present in enumerate(request["stdio"]):
        if present:
            fd = next(received)
            os.dup2(fd, target)
            os.close(fd)
        else:
            try:
                os.close(target)
            except OSError:
                pass
    cwd = next(received)
    os.fchdir(cwd)
    os.close(cwd)
    leftover = warm.open_fds()
    for fd in leftover:  # what the imports left open was refused before the fork; nothing should be here
        os.close(fd)
    os.umask(request["umask"])
    for name, (soft, hard) in request["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    os.environ.clear()
    os.environ.update(request["env"])
    reopen_stdio()
    sys.path[0] = os.getcwd()  # `python -m` puts its working directory first
    warm.refresh_from_environment()
    handoff.served = True  # running the module as __main__ must not hand it off again
    sys.argv = ["-m", *request["argv"]]
    sys.orig_argv = [request["executable"], "-m", request["module"], *request["argv"]]


def reopen_stdio() -> None:
    """sys.stdin/stdout/stderr as a fresh interpreter makes them for the job's descriptors: line-buffered
    output only on a terminal (stderr always), write-through instead with PYTHONUNBUFFERED."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))  # -u is among the flags, checked equal
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        try:
            os.fstat(fd)
        except OSError:
            setattr(sys, name, None)
            continue
        encoding = old.encoding if old is not None else "utf-8"
        errors = old.errors if old is not None else "strict"
        if fd == 0:
            stream = io.TextIOWrapper(io.BufferedReader(io.FileIO(fd, "rb", closefd=False)), encoding, errors)
        else:
            raw = io.FileIO(fd, "wb", closefd=False)
            stream = io.TextIOWrapper(
                raw if unbuffered else io.BufferedWriter(raw),
                encoding,
                errors,
                line_buffering=not unbuffered and (fd == 2 or os.isatty(fd)),
                write_through=unbuffered,
            )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def startup_env(env: dict[str, str] | os._Environ) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES}


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def announce(conn: socket.socket) -> None:
    """A forked job's first word to its client: its pid, and a pidfd to signal it by."""
    pidfd = os.pidfd_open(os.getpid())
    try:
        handoff.send(conn, {"pid": os.getpid()}, [pidfd])
    finally:
        os.close(pidfd)


def answer(conn: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    try:
        handoff.send(conn, message, list(fds))
    except OSError:
        pass  # the client is gone; the connection's close tells the loop


def _within(value: int, limit: int) -> bool:
    return limit == resource.RLIM_INFINITY or (value != resource.RLIM_INFINITY and 0 <= value <= limit)


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def die_with(parent: int) -> None:
    """SIGTERM (a graceful stop) when ``parent`` dies (Snakemake; the first warm process for the second);
    at once if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the loop's parent check still sees it within a second
    if os.getppid() != parent:
        os._exit(0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snakeddp.warm.server", description=__doc__)
    parser.add_argument("--fd", required=True, type=int, help="the listening socket (in a directory of mode 0700)")
    parser.add_argument("--parent", required=True, type=int, help="Snakemake's pid: this process ends with it")
    parser.add_argument(
        "--entry",
        action="append",
        help="a module it may run as `python -m MODULE` (repeated; default: the workflow's steps)",
    )
    parser.add_argument(
        "--preload",
        action="append",
        metavar="MODULE",
        help="import MODULE, lightest first (repeated; default: what every step imports, preload.ALL)",
    )
    parser.add_argument(
        "--need",
        action="append",
        metavar="ENTRY=MODULE",
        help="ENTRY's jobs wait until MODULE is imported (repeated; ENTRY may name a step: 'MODULE "
        "SUBCOMMAND'; default: NEEDS)",
    )
    parser.add_argument(
        "--slow",
        action="append",
        metavar="MODULE",
        help="of the preloaded modules, one a second warm process imports (repeated; default: preload.SLOW)",
    )
    args = parser.parse_args(argv)
    die_with(args.parent)
    # A fresh interpreter's handlers, before this process installs its own: every job gets them back.
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda signum, frame: None)  # the wake-up fd tells the loop
    # Held until each process's loop has its wake-up fd (Server.serve): a stop that comes first is not lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    listener = socket.socket(fileno=args.fd)  # bound and listening: a job that comes during an import waits
    home = os.path.dirname(listener.getsockname())
    entries = tuple(args.entry or handoff.ENTRY_POINTS)
    needs = dict(need.split("=", 1) for need in args.need) if args.need else dict(NEEDS)
    preload = list(args.preload or ALL)
    slow = set(args.slow or SLOW)
    second = None
    if any(module in slow for module in preload):
        second = start_second(
            dict(handlers=handlers, entries=entries, needs=needs, home=home),
            [*(m for m in preload if m in slow), *(m for m in preload if m in entries)],
            listener,
        )
        preload = [module for module in preload if module not in slow]
    server = Server(listener, args.parent, handlers, entries=entries, needs=needs, home=home, second=second)
    server.serve(preload, OPTIONAL)
    return 0


def start_second(settings: dict[str, Any], preload: list[str], listener: socket.socket) -> Second:
    """Fork the second warm process before this one imports anything: a Server with ``settings`` that
    serves what it is sent over the channel, importing ``preload``."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    first = os.getpid()
    pid = os.fork()
    if pid == 0:
        listener.close()  # the first alone accepts the jobs
        ours.close()
        die_with(first)
        try:
            Server(None, first, inbox=theirs, **settings).serve(preload, OPTIONAL)  # returns only by its stop's exit
        finally:
            os._exit(1)  # never on into the first's code
    theirs.close()
    ours.setblocking(False)
    return Second(pid, ours, frozenset(preload))


if __name__ == "__main__":
    raise SystemExit(main())
