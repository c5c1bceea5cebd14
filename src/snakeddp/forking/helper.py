"""An owner-only helper process of Snakemake's: the workflow's warm process (``snakeddp.warm``) and the
shared Spark application (``snakeddp.spark.application``) are each one, started and stopped here.

Snakemake's process starts it (``Helper.start_module``) with a unix socket in a new directory of mode 0700,
bound and listening before the helper runs (a job that comes first waits in the listen queue, it does
not give up), handed over as ``--fd``, and its own pid as ``--parent``, in a session of its own (a
terminal's Ctrl-C reaches the jobs through their clients, not the helper). The helper reads both
(``add_arguments``), ties itself to Snakemake (``tie_to_parent``: SIGTERM, a graceful stop, when
Snakemake dies, ``kill -9`` included) and serves only its owner (``stranger``: the peer's uid, by
SO_PEERCRED). ``close`` stops it (SIGTERM, then SIGKILL after its stop timeout) and removes its
directory; also at exit. Light: the Snakefile imports it in every job's Snakemake.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO

from snakeddp.forking.child import tie_to
from snakeddp.util import handoff, subprocesses, terminal


class Helper:
    """One helper process for one Snakemake invocation: ``start_module`` it, ``close`` it (also at exit)."""

    def __init__(self, prefix: str, name: str, stop_timeout_s: float) -> None:
        self.prefix = prefix  # its directory's name: <prefix><pid of Snakemake>-<random>
        self.name = name  # its socket's, in that directory
        self.stop_timeout_s = stop_timeout_s  # what its own stop may take before SIGKILL
        self.process: subprocess.Popen | None = None
        self.directory: str | None = None

    def start_module(
        self,
        module: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        stdout: int | IO[bytes] | None = None,
        stderr: int | IO[bytes] | None = None,
    ) -> str:
        """Start ``python -m module --fd N --parent PID *args``; its socket's path."""
        self.directory = terminal.socket_directory(self.prefix)
        path = os.path.join(self.directory, self.name)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            listener.listen(64)
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, f"--fd={listener.fileno()}", f"--parent={os.getpid()}", *args],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=None if env is None else dict(env),
                pass_fds=[listener.fileno()],
                start_new_session=True,
            )
        atexit.register(self.close)
        return path

    def close(self) -> None:
        """Stop it and remove its directory."""
        if self.process is not None:
            subprocesses.stop(self.process, self.stop_timeout_s)
            self.process = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
        atexit.unregister(self.close)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The helper's side of ``start_module``: the listening socket's descriptor, and Snakemake's pid."""
    parser.add_argument("--fd", required=True, type=int, help="the listening socket (in a directory of mode 0700)")
    parser.add_argument("--parent", required=True, type=int, help="Snakemake's pid: this process ends with it")


def listener(args: argparse.Namespace) -> socket.socket:
    """The socket ``start_module`` bound and listens on."""
    return socket.socket(fileno=args.fd)


def tie_to_parent(parent: int) -> bool:
    """SIGTERM (a graceful stop) when ``parent`` dies; False when it already has (then the signal never
    comes, and the helper should end at once)."""
    return tie_to(parent, signal.SIGTERM)


def stranger(conn: socket.socket) -> int | None:
    """The uid of the peer of ``conn`` where it is not this process's owner (refuse it), else None."""
    uid = handoff.peer_uid(conn)
    return None if uid == os.getuid() else uid
