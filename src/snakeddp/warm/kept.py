"""A warm process kept across Snakemake invocations: ``snakeddp warm`` starts one, prints the line that
names it (``export SNAKEDDP_WARM_SOCKET=...``) and keeps it until it is stopped (Ctrl-C, SIGTERM). A
local invocation whose environment names it forks its jobs from it (rules/hooks.smk: ``named``) instead
of starting its own, so torch and Lightning are imported once for many short invocations (a sweep run
one config at a time, a notebook's loop, a test file) rather than once each.

It is the same warm process (``snakeddp.warm``: owner-only, the same checks before every fork, a job
whose client is killed is killed too), tied to ``snakeddp warm`` instead of to one Snakemake, with
everything preloaded. What it declines it says on ``snakeddp warm``'s terminal, and the job starts cold.
An invocation it could not serve (another checkout, another interpreter) starts its own, as without it.
Light: the Snakefile imports ``named`` in every job's Snakemake.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from snakeddp.forking.safety import same_interpreter
from snakeddp.run.variables import import_path
from snakeddp.util import handoff
from snakeddp.warm.admission import startup_env

SOCKET = handoff.SOCKET
#: Beside its socket: the interpreter and the PYTHON* and locale variables the kept process runs with.
SERVES = "serves.json"
#: How often ``keep`` looks whether its warm process still runs.
POLL_S = 0.5


def named(env: Mapping[str, str]) -> str | None:
    """The socket of a kept warm process ``env`` names that can fork this invocation's jobs: a socket of this
    user's, in a directory of mode 0700 (as ``snakeddp warm`` makes it), whose process runs this interpreter
    with the jobs' PYTHON* and locale variables (``env``: Snakemake's, with what the workflow exports, as every
    job gets it; another checkout's src/ on PYTHONPATH differs). None otherwise: the invocation starts its own,
    rather than have each job declined and start cold."""
    path = env.get(SOCKET)
    if not path:
        return None
    directory = os.path.dirname(path)
    try:
        socket_stat, folder = os.stat(path), os.stat(directory)
        with open(os.path.join(directory, SERVES), encoding="utf-8") as file:
            serves = json.load(file)
    except (OSError, ValueError):
        return None
    if not stat.S_ISSOCK(socket_stat.st_mode) or folder.st_uid != os.getuid() or stat.S_IMODE(folder.st_mode) != 0o700:
        return None
    if not isinstance(serves, dict) or not same_interpreter(str(serves.get("executable"))):
        return None
    if not _running(serves.get("pid")):
        return None  # `snakeddp warm` was killed before it could remove its directory
    return path if serves.get("startup_env") == startup_env(env) else None


def _running(pid: object) -> bool:
    """Whether ``pid`` is a process of this user's that still runs."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError:  # gone, or another user's
        return False
    return True


def job_env(env: Mapping[str, str], cwd: Path) -> dict[str, str] | None:
    """``env`` as the workflow run from ``cwd`` gives its jobs (its checkout's src/ first on PYTHONPATH,
    snakeddp.workflow.plan), so that the warm process's import path is theirs; None outside a checkout."""
    for directory in (cwd, *cwd.parents):
        if (directory / "Snakefile").is_file():
            return {**env, "PYTHONPATH": import_path(str(directory / "src"), env)}
    return None


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def keep() -> int:
    """``snakeddp warm``: start a warm process with everything preloaded, print the export line, keep it
    until a stop signal; 1 if it ended by itself."""
    from snakeddp.warm.preload import ALL
    from snakeddp.warm.process import WarmProcess

    env = job_env(os.environ, Path.cwd().resolve())
    if env is None:
        print(
            f"snakeddp warm: no Snakefile in {Path.cwd()} or above: its warm process serves the jobs of one checkout. "
            "HINT: run snakeddp warm in the checkout's root, where you type snakemake",
            file=sys.stderr,
        )
        return 2
    warm = WarmProcess()
    # Ctrl-C too: a process started in the background of a script begins with SIGINT ignored.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    try:
        path = warm.start(env=env, preload=ALL)
        # Which invocations it can serve (named): written before the line that lets any use it.
        pid = warm.process.pid if warm.process is not None else 0
        serves = {"executable": sys.executable, "startup_env": startup_env(env), "pid": pid}
        with open(os.path.join(os.path.dirname(path), SERVES), "w", encoding="utf-8") as file:
            json.dump(serves, file)
        print(f"export {SOCKET}={shlex.quote(path)}", flush=True)
        while warm.process is not None and warm.process.poll() is None:
            time.sleep(POLL_S)
        status = warm.process.returncode if warm.process is not None else None
    except KeyboardInterrupt:
        return 0
    finally:
        warm.close()
    print(
        f"snakeddp warm: the warm process ended by itself (status {status}); each invocation starts its own again. "
        "HINT: to share one again, run snakeddp warm and export the line it prints",
        file=sys.stderr,
    )
    return 1
