"""Progress lines for people: into the job's log and, for jobs on the machine Snakemake runs on,
onto Snakemake's terminal too (Snakemake shows a job's own output only in its log file)."""

from __future__ import annotations

import os
import socket
import sys

# host:path of the terminal (Snakemake's stderr), set by the workflow for the local platform; listed
# with every other SNAKEDDP_* name in snakeddp.run.variables.
VARIABLE = "SNAKEDDP_TERMINAL"


def terminal_of_this_process(fd: int = 2) -> str:
    """``host:path`` through which a job on this host can write to this process's ``fd``."""
    path = os.ttyname(fd) if os.isatty(fd) else f"/proc/{os.getpid()}/fd/{fd}"
    return f"{socket.gethostname()}:{path}"


def say(line: str) -> None:
    """Print ``line`` to stderr (the job's log), flushed, and append it to the workflow's terminal."""
    print(line, file=sys.stderr, flush=True)
    host, _, path = os.environ.get(VARIABLE, "").partition(":")
    if not path or host != socket.gethostname():
        return
    try:
        with open(path, "a") as terminal:
            terminal.write(line + "\n")
    except OSError:
        pass  # Snakemake has gone, or its stderr cannot be reopened (a socket): the log has the line.
