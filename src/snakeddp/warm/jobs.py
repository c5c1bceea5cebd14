"""A job of the workflow's warm process: its connection to its client, and the forked child's side: it
tells its client it runs, then takes the job's stdio, directory, umask, limits and argv as its own
(the rest of a fresh interpreter's start is the forking layer's: snakeddp.forking.child)."""

from __future__ import annotations

import contextlib
import io
import os
import resource
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from snakeddp.forking.child import close_fds
from snakeddp.util import handoff


@dataclass
class Job:
    conn: socket.socket
    pid: int
    pidfd: int


def command(request: dict[str, Any]) -> list[str]:
    """The job's command line: ``python -m MODULE ARGS``."""
    return [request["executable"], "-m", request["module"], *request["argv"]]


def drop(conn: socket.socket, fds: list[int]) -> None:
    """Close a job's connection and the descriptors it sent (the job runs cold, or is gone)."""
    conn.close()
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


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


def kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def place(request: dict[str, Any], fds: list[int]) -> None:
    """Give this process the job's stdio, directory, umask, limits and import path (its environment and
    argv come with the module's run: snakeddp.forking.child.become)."""
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
    close_fds()  # what the imports left open was refused before the fork; nothing should be here
    os.umask(request["umask"])
    for name, (soft, hard) in request["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    reopen_stdio(request["env"])
    sys.path[0] = os.getcwd()  # `python -m` puts its working directory first
    handoff.served = True  # running the module as __main__ must not hand it off again


def reopen_stdio(env: dict[str, str]) -> None:
    """sys.stdin/stdout/stderr as a fresh interpreter with ``env`` makes them for the job's descriptors:
    line-buffered output only on a terminal (stderr always), write-through instead with PYTHONUNBUFFERED."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))  # -u is among the flags, checked equal
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
