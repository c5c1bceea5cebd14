"""Which jobs the workflow's warm process takes: only its owner's (SO_PEERCRED), only the workflow's own
steps, and only a request for what the job's own command line would have set anyway (its arguments,
environment, working directory, umask, limits, stdio), for the same interpreter, flags and import path
as this process's. The front warm process checks every request; the heavy one is its fork, with the
same interpreter, flags, path and limits. Anything else is declined, and the job starts cold."""

from __future__ import annotations

import os
import resource
import sys
from typing import Any

from snakeddp.forking.safety import same_interpreter

#: How long a connected client may take to send its request.
REQUEST_TIMEOUT_S = 5.0
#: Environment variables read when an interpreter starts: a job whose differ would not be this interpreter.
STARTUP_PREFIXES = ("PYTHON",)
STARTUP_NAMES = ("LC_ALL", "LC_CTYPE", "LANG")
#: What a request holds, and of which type (snakeddp.util.handoff.request's, and the client's stdio).
SHAPE = {
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


class Declined(Exception):
    """Why a job starts cold: one clause, said once on the workflow's terminal."""


class Admission:
    """What one warm process takes: requests to run one of ``entries``, as this interpreter would."""

    def __init__(self, entries: tuple[str, ...]) -> None:
        self.entries = entries
        self.startup_env = startup_env(os.environ)

    def check(self, request: dict[str, Any], fds: list[int]) -> None:
        """Decline what a warm process would not be, or may not run."""
        module = request.get("module")
        if module not in self.entries:
            raise Declined(f"{str(module)[:80]!r} is not a step of the workflow")
        for key, kind in SHAPE.items():
            if not isinstance(request.get(key), kind):
                raise Declined(f"its request's {key} is not a {kind.__name__}")
        if not all(isinstance(a, str) for a in request["argv"]) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items()
        ):
            raise Declined("its arguments or environment are not strings")
        if len(fds) != sum(map(bool, request["stdio"])) + 1 or len(request["stdio"]) != 3:
            raise Declined("its request did not carry its stdio and working directory")
        if not same_interpreter(request["executable"]):
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


def startup_env(env: dict[str, str] | os._Environ) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES}


def _within(value: int, limit: int) -> bool:
    return limit == resource.RLIM_INFINITY or (value != resource.RLIM_INFINITY and 0 <= value <= limit)
