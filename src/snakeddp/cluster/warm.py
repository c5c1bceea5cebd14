"""Ranks forked from one warm process: a node's ranks import torch and Lightning once, not once each.

Every rank of a run is ``python -m snakeddp.train``, and each imported torch, Lightning and snakeddp
before doing anything: 3 s a rank here, and N ranks importing at once on the same cores (or from
one shared file system on a cluster) take N times the CPU. With ``--fork-ranks`` the supervisor
imports the rank's entry module once, checks that forking is safe, and forks every rank from
itself; each child becomes what ``python -m MODULE ARGS`` would have been (its environment,
argv, session, signal handlers, thread pool size, exit status) and ends with ``os._exit``.
PySpark's worker daemon (``pyspark/daemon.py``) and multiprocessing's forkserver preload do the same;
so does the workflow's warm process (``snakeddp.warm``), with which it shares the forking layer
(``snakeddp.forking``: the imports, the checks, the child's set-up and exit).

Forking after ``import torch`` is safe only while the process has one thread and no CUDA context:
checked before every fork, never assumed. The warm process imports with one OpenMP thread (so
that torch's import starts no pool, which a fork would leave half-copied) and each child sizes its
pool from its own OMP_NUM_THREADS. When a check fails the ranks start cold, as before, and the
supervisor says why in one line. ``SNAKEDDP_WARM_START=0`` turns it off.

What a forked rank cannot make look fresh: ``/proc/PID/cmdline`` and ``/proc/PID/environ`` are
the supervisor's (they are what exec() set; ``os.environ`` is the rank's); its string hashes use
the supervisor's seed (PYTHONHASHSEED), the same in every rank of the node; numpy's own BLAS pool
keeps the one thread it was loaded with (torch's is sized from the rank's variables); and what the
imports allocated is already frozen out of garbage collection (``gc.freeze``).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from snakeddp.cluster.lifecycle import FORWARDED
from snakeddp.errors import LaunchError
from snakeddp.forking.child import become, close_fds, detach, fork
from snakeddp.forking.imports import IMPORTED_ENV, import_once
from snakeddp.forking.safety import NotForkable, check_forkable, open_fds, same_interpreter
from snakeddp.run.variables import RANK_START, WARM_START

__all__ = ["RANK_START", "WARM_START", "NotForkable", "Warm", "enabled"]


def enabled(env: Mapping[str, str]) -> bool:
    """The switch: SNAKEDDP_WARM_START, on unless it is 0."""
    value = env.get(WARM_START, "1")
    if value not in ("0", "1"):
        raise LaunchError(
            f"{WARM_START}={value!r} is neither 1 nor 0. HINT: export {WARM_START}=0 to start every job and "
            "rank as a process of its own, or unset it to fork them from processes that imported once."
        )
    return value == "1"


def entry_module(command: Sequence[str]) -> str:
    """The module of a ``python -m MODULE ...`` command run by this very interpreter."""
    if len(command) < 3 or command[1] != "-m":
        raise NotForkable(f"the ranks' command is not `python -m MODULE` ({command[0]} {command[1:2]})")
    if not same_interpreter(command[0]):
        raise NotForkable(f"the ranks run another interpreter ({command[0]}, not {sys.executable})")
    return command[2]


class Warm:
    """One process that has imported a rank's modules, and forks ranks from it while that stays safe."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self.module = entry_module(command)
        # What a fresh interpreter has for the signals the supervisor handles itself: each child gets these back.
        # A cold rank is exec'd by the supervisor, which handles them, and exec resets a handled signal to its
        # default: SIG_DFL, and Python's KeyboardInterrupt for SIGINT, whatever the supervisor inherited
        # (SIG_IGN for SIGINT under nohup or a script's `&`).
        self.handlers = {signum: signal.SIG_DFL for signum in FORWARDED} | {signal.SIGINT: signal.default_int_handler}
        # Inherited from whoever started the supervisor, and its own later (the reserved port): a
        # child closes them, as Popen's close_fds does. Nothing the imports open may join them.
        self.own_fds = open_fds()
        self.imported_env: dict[str, str] = {}

    def own(self, fd: int) -> None:
        self.own_fds.add(fd)

    def preload(self) -> None:
        """Import the entry module (and so everything it imports) once, with one-thread pools."""
        import_once([self.module], entries=[self.module])
        # What imports put in os.environ (torch sets TORCHINDUCTOR_CACHE_DIR, for one): a cold rank has it
        # too, having imported the same. Here or in the workflow's warm process this one was forked from.
        self.imported_env = dict(IMPORTED_ENV)
        self.check()

    def check(self) -> None:
        """The process may fork: one thread, no CUDA context, no file open but its stdio and its own."""
        check_forkable(self.own_fds, self.module)

    def fork(self, env: dict[str, str], close: Sequence[Any]) -> int:
        """A child that becomes ``python -m MODULE ARGS`` with ``env``; its pid. ``close``: the supervisor's
        own sockets and files, which a cold rank never inherits."""
        self.check()
        return fork(lambda supervisor: self.become(env, close, supervisor), FORWARDED)

    def become(self, env: dict[str, str], close: Sequence[Any], supervisor: int) -> int:
        """The child: a fresh ``python -m MODULE ARGS``; its exit status."""
        # A session of its own, as a cold rank's start_new_session: Ctrl-C reaches it once, passed on.
        detach(supervisor, self.handlers, FORWARDED)
        for held in close:  # the supervisor's (its reserved port): a cold rank never had them
            held.close()
        close_fds()  # close_fds, as Popen does for a cold rank (check() saw only these)
        return become(self.command, {**self.imported_env, **env, RANK_START: "warm"})
