"""A forked child, from the fork to its exit: it becomes what ``python -m MODULE ARGS`` would have been
(its session, parent-death signal, a fresh interpreter's signal handlers, environment, argv, the
module as ``__main__``, atexit and the exit status) and never comes back into its parent's code."""

from __future__ import annotations

import atexit
import ctypes
import os
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from snakeddp.forking.imports import refresh_from_environment
from snakeddp.forking.safety import open_fds

PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGKILL) -> bool:
    """Ask Linux to send this process ``signum`` when its parent dies (SIGKILL: torchrun, srun's step,
    orted, the supervisor, a warm process; SIGTERM, a graceful stop: Snakemake for its warm process).

    Without it, `kill -9` of a launcher leaves its ranks training on their own, writing into a
    run directory that the next attempt is about to use. Returns False where unsupported.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def tie_to(parent: int, signum: int) -> bool:
    """``die_with_parent(signum)``, and whether ``parent`` is still this process's parent: False when it
    died before the tie was made, so its death's signal never comes."""
    die_with_parent(signum)
    return os.getppid() == parent


def fork(child: Callable[[int], int], blocked: Collection[int]) -> int:
    """Fork; the child runs ``child(the parent's pid)`` and exits with the status it returns (``os._exit``:
    never back into the parent's code). The child's pid."""
    sys.stdout.flush()  # else what the parent buffered would be written twice, once by the child
    sys.stderr.flush()
    # Held until the child has a fresh interpreter's handlers (detach): a signal in between would run the
    # parent's handler in the child (the supervisor's forwarding would signal the ranks forked before it;
    # a warm process's would write to the wake-up fd it shares with the child, and stop the warm process).
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = child(parent)
            except KeyboardInterrupt:  # a Ctrl-C passed on before its own code ran: it dies of it, as one cold would
                traceback.print_exc()
                die_of_sigint()
            except BaseException:  # never back into the parent's code: this process is a job or a rank now
                traceback.print_exc()
            finally:
                os._exit(code)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)  # also when the fork failed (EAGAIN)
    return pid


def detach(parent: int, handlers: Mapping[int, Any], blocked: Collection[int]) -> None:
    """A forked child's first steps: a session of its own, dead when ``parent`` dies (as a cold process's
    preexec_fn makes it), a fresh interpreter's ``handlers`` back, and the ``blocked`` signals that
    came since the fork delivered."""
    os.setsid()
    if not tie_to(parent, signal.SIGKILL):  # it died before the line above could tie this process to it
        os.kill(os.getpid(), signal.SIGKILL)
    signal.set_wakeup_fd(-1)  # the parent's loop's, if it had one
    for signum, handler in handlers.items():  # not the parent's forwarding or wake-up
        signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)


def close_fds() -> None:
    """Close every descriptor beyond stdio, as Popen's close_fds does for a cold process. What the
    parent holds as objects (sockets, files) the child closes through them first: a number closed
    under an object would be closed again, reused, when the object goes."""
    for fd in open_fds():
        os.close(fd)


def become(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``command`` (``python -m MODULE ARGS``) here as a fresh interpreter would with ``env``; the exit
    status it leaves."""
    os.environ.clear()  # the environment exactly, as Popen(env=...) or exec gives it
    os.environ.update(env)
    refresh_from_environment()
    sys.argv = ["-m", *command[3:]]  # run_module puts the module's file in argv[0], as `python -m` does
    sys.orig_argv = list(command)
    return run(command[2])


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
        die_of_sigint()
        return 130
    except BaseException as error:
        report(error)
        code = 1
    finish()
    return code


def die_of_sigint() -> None:
    """Python exits by SIGINT itself on an unhandled KeyboardInterrupt: the parent sees the signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    os.kill(os.getpid(), signal.SIGINT)


def report(error: BaseException) -> None:
    """The traceback the interpreter prints, from runpy's frames on (this module's is not the child's)."""
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
