"""Progress lines for people: into the job's log and, for jobs on the machine Snakemake runs on,
onto Snakemake's terminal too (Snakemake shows a job's own output only in its log file).

One writer per stream. A job never opens Snakemake's output itself: reopening it
(``/proc/<pid>/fd/2``) makes a second open file with an offset of its own, and on a file opened
with ``>`` (no O_APPEND) Snakemake's next write lands where the job's line was, so the lines
overwrote each other. O_APPEND on the job's side alone cannot fix that (Snakemake's side still
writes at its own offset), and Snakemake's stream may be anything: a terminal, a file opened
with ``>`` or ``>>``, a pipe, a pseudo-terminal, sbatch's output file. So a job hands each line
to a ``Relay`` in Snakemake's own process, over a unix socket in a directory only this user can
enter, and the relay writes it with the function it was given (Snakemake's logger: the same
stream and the same lock as Snakemake's own lines). The relay answers once the line is written,
so ``say`` returns only then: a job's lines are out before Snakemake can say the job finished.

A rank whose output a driver job reads line by line (a Spark run's, through its line server) has no
socket to reach: ``say`` marks its line instead, and the driver, a job beside Snakemake, says the
marked lines again (``passed_on``) where the others go to its log alone.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable

from snakeddp.errors import print_line
from snakeddp.util import threads

# host:path of the relay's socket, set by the workflow for the local platform; listed with every
# other SNAKEDDP_* name in snakeddp.run.variables.
VARIABLE = "SNAKEDDP_TERMINAL"
# A progress line is short; a bigger message is cut here rather than held in the relay's memory.
MAX_LINE = 64 * 1024
# How long the relay waits for a client that connected to send its line (a job stopped
# mid-line must not hold every other job's lines back).
CLIENT_TIMEOUT_S = 2.0
# How long closing waits for the relay's thread to finish the line it is writing.
CLOSE_TIMEOUT_S = 5.0
# A relay's directory: snakeddp-terminal-<pid of Snakemake>-<random>.
PREFIX = "snakeddp-terminal-"
# VARIABLE's value in a rank whose output its driver reads line by line, and the mark its said lines carry
# there: ASCII's unit separator, which no line of a log starts with and a log viewer shows nothing of (the
# record separator, 0x1e, would do as well but str.splitlines breaks lines at it).
THROUGH_DRIVER = "driver"
MARK = "\x1f"


def say(line: str) -> None:
    """Print ``line`` to stderr (the job's log), flushed, and hand it to the workflow's relay."""
    how = os.environ.get(VARIABLE, "")
    if how == THROUGH_DRIVER:
        print_line(MARK + line)
        return
    print_line(line)
    host, _, path = how.partition(":")
    if not path or host != socket.gethostname():
        return
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as relay:
            relay.connect(path)
            relay.sendall(line.encode(errors="replace")[:MAX_LINE])
            relay.shutdown(socket.SHUT_WR)
            relay.recv(1)  # the relay's answer: the line is written (or it closed, and will not write it)
    except OSError:
        pass  # Snakemake has gone or is finishing: the log has the line.


def passed_on(line: str) -> None:
    """A line of a rank's output, at the driver job that reads it: said again if the rank said it (onto the
    terminal too), else printed to the job's log."""
    if line.startswith(MARK):
        say(line[len(MARK) :])
    else:
        print_line(line)


def remove_stale_relays(base: str, prefix: str = PREFIX) -> list[str]:
    """Remove this user's relay directories (or the warm process's, by ``prefix``) under ``base`` whose
    Snakemake has gone without closing them (killed: SIGKILL, SIGTERM); returns them. Another user's, or
    a live process's, are kept."""
    removed = []
    for path in glob.glob(os.path.join(glob.escape(base), f"{prefix}*")):
        match = re.fullmatch(rf"{re.escape(prefix)}(\d+)-[^/]+", os.path.basename(path))
        try:
            if not match or os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(match[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:
            continue  # alive under another user (EPERM), or gone meanwhile
    return removed


def socket_directory(prefix: str) -> str:
    """A new directory for a socket of this process's: ``<prefix><pid>-<random>``, mode 0700 (mkdtemp's),
    so no other user can connect; stale ones of dead processes under the same prefix are removed first.
    A short base, since a socket's path is limited to about 100 bytes and TMPDIR can be long on clusters."""
    base = tempfile.gettempdir()
    base = base if len(base) < 60 else "/tmp"  # noqa: S108
    remove_stale_relays(base, prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base)


class Relay:
    """Writes the lines jobs ``say`` with ``write``, one at a time, in the order they arrive.

    Nothing listens until ``start``. Its thread is a daemon, so it never keeps Snakemake's process
    alive; ``close`` (also at exit) writes the lines that arrived before it and refuses later ones,
    so nothing is written after Snakemake's last line.
    """

    def __init__(self, write: Callable[[str], object]) -> None:
        self._write = write
        self._server: socket.socket | None = None
        self._closing = False

    def start(self) -> str:
        """Listen, and return the ``host:path`` jobs find the relay at (``VARIABLE``'s value)."""
        self._dir = socket_directory(PREFIX)
        self.path = os.path.join(self._dir, "terminal")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(64)
        # In Snakemake's process: a Ctrl-C its thread took would wait for Snakemake's main thread to wake.
        self._thread = threads.start(
            threading.Thread(target=self._serve, args=(self._server,), name="snakeddp-terminal", daemon=True)
        )
        atexit.register(self.close)
        return self.address

    @property
    def address(self) -> str:
        """``host:path``, for ``VARIABLE``: jobs on another host leave their lines in their logs."""
        return f"{socket.gethostname()}:{self.path}"

    def _serve(self, server: socket.socket) -> None:
        try:
            while True:
                client, _ = server.accept()
                with client:
                    line = self._receive(client)
                    if self._closing and line is None:
                        return  # close()'s own connection: every line that came before it is written
                    if line is None:
                        continue
                    self._write(line)
                    with contextlib.suppress(OSError):  # a job killed meanwhile waits for no answer
                        client.sendall(b"\n")
        except OSError:
            return  # the socket was closed under accept()
        finally:
            # Whatever ended this thread, jobs that connect later are refused at once, not left waiting.
            server.close()

    @staticmethod
    def _receive(client: socket.socket) -> str | None:
        client.settimeout(CLIENT_TIMEOUT_S)
        chunks, size = [], 0
        try:
            while size < MAX_LINE and (chunk := client.recv(MAX_LINE - size)):
                chunks.append(chunk)
                size += len(chunk)
        except OSError:
            return None
        return b"".join(chunks).decode(errors="replace").rstrip("\n") if chunks else None

    def close(self) -> None:
        """Write the lines already sent, then stop; a line sent after this stays in its job's log."""
        if self._server is None or self._closing:
            return
        self._closing = True
        try:
            # accept() is woken by one more connection, queued behind every line sent before it.
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
                wake.connect(self.path)
        except OSError:
            pass
        self._thread.join(CLOSE_TIMEOUT_S)
        self._server.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        atexit.unregister(self.close)
