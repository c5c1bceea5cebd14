"""Start and stop the workflow's warm process from Snakemake's own (the Snakefile's onstart, onsuccess
and onerror). Imports nothing heavy: every dry run and every job reads the Snakefile."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import time

from snakeddp.util import handoff, subprocesses, terminal

#: A warm process's directory: snakeddp-warm-<pid of Snakemake>-<random>, mode 0700.
PREFIX = "snakeddp-warm-"
#: Said after why the jobs start cold (the server says the same for what it declines).
HINT = (
    "HINT: the jobs run the same, only their start is slower; export SNAKEDDP_WARM_START=0 to start them "
    "cold without this line."
)
SOCKET = handoff.SOCKET
#: Made in its directory once it has imported everything it preloads.
IMPORTED = "imported"
#: How long stopping waits for the warm process (its own stop gives running jobs 5 s) before SIGKILL.
STOP_TIMEOUT_S = 10.0


def why_cold(deployment: set[str], env: dict[str, str] | os._Environ) -> str | None:
    """Why this invocation's jobs start cold, or None: they are forked from a warm process."""
    from snakeddp.cluster.warm import enabled  # its HINT names the switch when it is mistyped

    if not enabled(env):
        return ""  # the user's choice: nothing to say
    if deployment & {"CONDA", "APPTAINER"}:
        which = " and ".join(sorted(d.lower() for d in deployment & {"CONDA", "APPTAINER"}))
        return f"--sdm {which} runs each job in an environment of its own"
    return None


class WarmProcess:
    """One warm process for one Snakemake invocation: started by ``start``, gone by ``close`` or with
    Snakemake itself (it watches its parent)."""

    def __init__(
        self,
        entries: tuple[str, ...] = handoff.ENTRY_POINTS,
        stderr: int | None = None,
        needs: dict[str, str] | None = None,
        slow: tuple[str, ...] | None = None,
    ) -> None:
        self.entries = entries  # what it runs (its starter decides; a job's request never can)
        self.needs = needs  # which entry's jobs wait for which import (default: the server's NEEDS)
        self.slow = slow  # what a second warm process imports (default: the server's SLOW)
        self.stderr = stderr  # Snakemake's own by default: the warm process's few lines are the workflow's
        self.process: subprocess.Popen | None = None
        self.directory: str | None = None

    def start(self, env: dict[str, str] | None = None, preload: tuple[str, ...] = ()) -> str:
        """Start it and return its socket's path (handoff.SOCKET's value for the jobs). It imports
        ``preload`` (the invocation's, snakeddp.warm.preload.for_rules), by default what every step imports."""
        self.directory = terminal.socket_directory(PREFIX)
        path = os.path.join(self.directory, "warm")
        # Bound and listening here, before any job can look for it: a job that comes before the warm
        # process's loop runs waits in the listen queue (it does not start cold).
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            listener.listen(64)
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "snakeddp.warm.server",
                    f"--fd={listener.fileno()}",
                    f"--parent={os.getpid()}",
                    *(f"--entry={entry}" for entry in self.entries),
                    *(f"--need={entry}={module}" for entry, module in (self.needs or {}).items()),
                    *(f"--preload={module}" for module in preload),
                    *(f"--slow={module}" for module in self.slow or ()),
                ],
                stdin=subprocess.DEVNULL,
                stderr=self.stderr,
                env=env,  # Snakemake's own, which every job inherits
                pass_fds=[listener.fileno()],
                start_new_session=True,  # a terminal's Ctrl-C reaches the jobs through their clients, not here
            )
        atexit.register(self.close)
        return path

    def imported(self, timeout: float) -> bool:
        """Wait until it has imported everything it preloads, or all it will (its second warm process
        died), or ``timeout`` seconds; whether it has.
        Jobs do not wait for this (they are forked between imports): benchmarks and tests do."""
        deadline = time.monotonic() + timeout
        marker = os.path.join(self.directory or "", IMPORTED)
        while not os.path.exists(marker):
            if time.monotonic() > deadline or self.process is None or self.process.poll() is not None:
                return False
            time.sleep(0.05)
        return True

    def close(self) -> None:
        """Stop it (running jobs get SIGTERM, then SIGKILL), and remove its directory."""
        if self.process is not None:
            subprocesses.stop(self.process, STOP_TIMEOUT_S)
            self.process = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
        atexit.unregister(self.close)
