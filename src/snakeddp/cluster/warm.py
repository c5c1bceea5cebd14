"""Ranks forked from one warm process: a node's ranks import torch and Lightning once, not once each.

Every rank of a run is ``python -m snakeddp.train``, and each imported torch, Lightning and snakeddp
before doing anything: 3 s a rank here, and N ranks importing at once on the same cores (or from
one shared file system on a cluster) take N times the CPU. With ``--fork-ranks`` the supervisor
imports the rank's entry module once, checks that forking is safe, and forks every rank from
itself; each child becomes what ``python -m MODULE ARGS`` would have been (its environment,
argv, session, signal handlers, thread pool size, exit status) and ends with ``os._exit``.
PySpark's worker daemon (``pyspark/daemon.py``) and multiprocessing's forkserver preload do the same.

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

import atexit
import glob
import importlib
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from snakeddp.cluster.lifecycle import FORWARDED, die_with_parent
from snakeddp.errors import LaunchError
from snakeddp.run.variables import RANK_START, WARM_START
from snakeddp.util.handoff import is_open
from snakeddp.util.shutdown import freeze_imports

#: Read by the OpenMP and MKL runtimes when torch loads them: one thread, so that no pool exists at a fork.
POOL_SIZES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


# How long the warm process waits for native threads an import left to end before it gives up forking.
NATIVE_THREADS_WAIT_S = 1.0


class NotForkable(Exception):
    """Why the ranks start cold: one clause, said once by the supervisor."""


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
    try:
        same = os.path.samefile(command[0], sys.executable)
    except OSError:
        same = False
    if not same:
        raise NotForkable(f"the ranks run another interpreter ({command[0]}, not {sys.executable})")
    return command[2]


def native_threads() -> list[str]:
    """The names (comm) of this process's threads other than the calling one, as the kernel lists them."""
    me = str(threading.get_native_id())
    names = []
    for task in os.listdir("/proc/self/task"):
        if task == me:
            continue
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip() or task)
        except OSError:
            continue  # it ended while we looked
    return names


def open_fds() -> set[int]:
    """This process's file descriptors beyond stdio (the one listdir itself opened is closed again)."""
    return {fd for fd in map(int, os.listdir("/proc/self/fd")) if fd > 2 and is_open(fd)}


#: What importing put in os.environ in this process (or the warm process it was forked from).
IMPORTED_ENV: dict[str, str] = {}


def import_once(modules: Sequence[str], entries: Sequence[str]) -> None:
    """Import ``modules`` (and so all they import) with one-thread pools, then forget ``entries``
    (run later as ``__main__``) and freeze what was imported out of garbage collection."""
    before = dict(os.environ)
    saved = {name: os.environ.get(name) for name in POOL_SIZES}
    # The pool sizes are the children's to set (each does, from its own environment, in
    # refresh_from_environment); a pool started by the import would survive a fork only as a
    # half-copied lock (without a size, torch's import left a native thread here).
    os.environ.update({name: "1" for name in POOL_SIZES})
    try:
        for module in modules:
            try:
                importlib.import_module(module)
            except BaseException as error:  # what the cold processes meet too, and report in their own words
                raise NotForkable(f"importing {module} failed ({type(error).__name__}: {error})") from None
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    IMPORTED_ENV.update({k: v for k, v in os.environ.items() if k not in before})
    for entry in entries:
        # A fresh `python -m MODULE` has the module only as __main__: kept under its name as well,
        # runpy would warn, and the module would exist twice. Its imports stay.
        sys.modules.pop(entry, None)
        package, _, name = entry.rpartition(".")
        if package and hasattr(sys.modules.get(package), name):
            delattr(sys.modules[package], name)
    # Imported objects move where no collection in a child visits them: their pages stay shared
    # (copy-on-write) instead of being copied into every child by its first collection; and torch's
    # operator libraries are not undone at every child's exit.
    freeze_imports()


def check_forkable(own_fds: set[int], imported: str) -> None:
    """This process may fork: one thread, no CUDA context, no file open but its stdio and ``own_fds``."""
    if threading.active_count() != 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.current_thread())
        raise NotForkable(f"the warm process runs {threading.active_count() - 1} Python thread(s) ({names})")
    # Native threads too (an OpenMP or BLAS pool, a library's worker): a fork copies only this one.
    # Some exit by themselves moments after the import that started them (seen once here, under
    # load, for a 2-rank run): wait a little for those before starting cold.
    others = native_threads()
    deadline = time.monotonic() + NATIVE_THREADS_WAIT_S
    while others and time.monotonic() < deadline:
        time.sleep(0.02)
        others = native_threads()
    if others:
        raise NotForkable(
            f"the warm process runs {len(others)} native thread(s) besides its own ({', '.join(sorted(others))})"
        )
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise NotForkable("CUDA was initialised in the warm process (a CUDA context does not survive fork)")
    # The driver itself, which any library may load and initialise without torch knowing.
    with open("/proc/self/maps") as maps:
        if any("libcuda.so" in line for line in maps):
            raise NotForkable("the CUDA driver (libcuda) is loaded in the warm process")
    stray = open_fds() - own_fds
    if stray:
        raise NotForkable(f"importing {imported} opened file descriptors {sorted(stray)}: a fork would share them")


class Warm:
    """One process that has imported a rank's modules, and forks ranks from it while that stays safe."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self.module = entry_module(command)
        # What a fresh interpreter has for the signals the supervisor handles itself (made before it
        # installs its own): each child gets these back.
        self.handlers = {signum: signal.getsignal(signum) for signum in FORWARDED}
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
        sys.stdout.flush()  # else what the supervisor buffered would be written twice, once by the child
        sys.stderr.flush()
        # Held until the child has replaced the supervisor's handlers: a signal in between would run the
        # supervisor's forwarding in the child and signal the ranks forked before it.
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:
            become(self.command, {**self.imported_env, **env, RANK_START: "warm"}, self.handlers, close, supervisor)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        return pid


def become(
    command: list[str], env: dict[str, str], handlers: dict[int, Any], close: Sequence[Any], supervisor: int
) -> None:
    """The child: turn into a fresh ``python -m MODULE ARGS`` and never return (``os._exit``)."""
    code = 1
    try:
        # A session of its own, as a cold rank's start_new_session: Ctrl-C reaches it once, passed on.
        detach(supervisor, handlers, FORWARDED)
        for held in close:  # the supervisor's (its reserved port): a cold rank never had them
            held.close()
        for fd in open_fds():  # close_fds, as Popen does for a cold rank (check() saw only these)
            os.close(fd)
        os.environ.clear()  # the rank's environment exactly, as Popen(env=...) gives it
        os.environ.update(env)
        refresh_from_environment()
        sys.argv = ["-m", *command[3:]]  # run_module puts the module's file in argv[0], as `python -m` does
        sys.orig_argv = list(command)
        code = run(command[2])
    except BaseException:  # never back into the supervisor's code: this process is a rank now
        traceback.print_exc()
    finally:
        os._exit(code)


def detach(parent: int, handlers: dict[int, Any], blocked: Sequence[int]) -> None:
    """A forked child's first steps: a session of its own, dead when ``parent`` dies (as a cold process's
    preexec_fn makes it), a fresh interpreter's ``handlers`` back, and the ``blocked`` signals that
    came since the fork delivered."""
    os.setsid()
    die_with_parent()
    if os.getppid() != parent:  # it died before the line above could tie this process to it
        os.kill(os.getpid(), signal.SIGKILL)
    signal.set_wakeup_fd(-1)  # the parent's loop's, if it had one
    for signum, handler in handlers.items():  # not the parent's forwarding or wake-up
        signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)


def refresh_from_environment() -> None:
    """State the imports derived from the environment, derived again from the rank's.

    Lightning and torchmetrics read the rank once, at import (the warm process has none); numpy
    seeded its global generator from the OS at import (each fresh rank gets its own stream); torch's
    OpenMP and MKL pools were sized to one thread for the warm import, and take the size a fresh
    process would: the environment's, else one thread per physical core.
    """
    fabric = sys.modules.get("lightning.fabric.utilities.rank_zero")
    if fabric is not None:
        fabric.rank_zero_only.rank = fabric._get_rank() or 0
    torchmetrics = sys.modules.get("torchmetrics.utilities.prints")
    if torchmetrics is not None:
        torchmetrics.rank_zero_only.rank = int(os.environ.get("LOCAL_RANK", 0))
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(pool_size(os.environ) or physical_cores())


def physical_cores() -> int:
    """torch's intra-op pool size where nothing sets one: the machine's physical cores (cpuinfo's count)."""
    siblings = set()
    for cpu in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list"):
        try:
            with open(cpu) as listing:
                siblings.add(listing.read().strip())
        except OSError:
            continue
    return len(siblings) or os.cpu_count() or 1


def pool_size(env: Mapping[str, str]) -> int:
    """The intra-op threads torch gives itself in a fresh process: MKL_NUM_THREADS over OMP_NUM_THREADS
    (at::intraop_default_num_threads); 0 when neither is a positive count (then nothing was forced)."""
    size = 0
    for name in POOL_SIZES:
        value = env.get(name, "")
        if value.isdigit() and int(value) > 0:
            size = int(value)
    return size


def run(module: str) -> int:
    """``python -m MODULE`` from here on, and its exit as the interpreter would make it."""
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = exit_code(stop.code)
    except KeyboardInterrupt as error:
        report(error)
        finish()
        # Python exits by SIGINT itself on an unhandled KeyboardInterrupt: the parent sees the signal.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException as error:
        report(error)
        code = 1
    finish()
    return code


def report(error: BaseException) -> None:
    """The traceback the interpreter prints, from runpy's frames on (this module's is not the rank's)."""
    if error.__traceback__ is not None:
        error.__traceback__ = error.__traceback__.tb_next
    sys.excepthook(type(error), error, error.__traceback__)


def exit_code(code: object) -> int:
    """What ``sys.exit(code)`` leaves as the exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish() -> None:
    """What the interpreter does at exit before it is gone: wait for non-daemon threads, run atexit
    callbacks, flush stdio (multiprocessing's forked children do the first and the last)."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
