"""A rank for tests/cluster/test_warm.py: ``python -m tests.cluster.rank_probe DIR ACTS``.

Importing it imports torch, numpy and Lightning's rank helper, as ``snakeddp.train`` does, so the
supervisor's warm process preloads them (PROBE_TORCH=0: none of them, for tests of exits and
signals, which need no torch); with PROBE_THREAD=1 the import also starts a thread (a module the
warm process must not fork from). Run, it writes everything a process can observe
about how it was started to DIR/rank-RANK.json, prints one line, then does what ACTS (JSON, one
entry per rank) says: "exit:N", "raise", "os_exit:N", "signal:N" (kills itself), "interrupt"
(an unhandled KeyboardInterrupt), "atexit" (a callback that writes a file), "thread" (a
non-daemon thread still writing after the main module ends), "wait" (until signalled), "note"
(notes every SIGINT, SIGUSR1 and SIGTERM in DIR/signals-RANK, exits 143 on SIGTERM).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import resource
import signal
import sys
import threading
import time

if os.environ.get("PROBE_TORCH", "1") == "1":
    import numpy
    import torch
    from lightning.fabric.utilities.rank_zero import rank_zero_only

if os.environ.get("PROBE_THREAD") == "1":
    threading.Thread(target=time.sleep, args=(60,), daemon=True, name="probe-import-thread").start()

SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGPIPE", "SIGCHLD", "SIGHUP", "SIGXFSZ")


def handler_name(handler: object) -> str:
    return getattr(handler, "__name__", repr(handler))


def pdeathsig() -> int:
    value = ctypes.c_int()
    ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
    return value.value


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def observed() -> dict:
    seen = {
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "main": __name__,
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "umask": umask(),
        "rlimits": [resource.getrlimit(getattr(resource, name)) for name in ("RLIMIT_NOFILE", "RLIMIT_CORE")],
        "stdio": [os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)],
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd"))[3:],
        "own_session": os.getsid(0) == os.getpid(),
        "parent_is_supervisor": b"snakeddp.cluster.supervisor" in open(f"/proc/{os.getppid()}/cmdline", "rb").read(),
        "pdeathsig": pdeathsig(),
        "handlers": {name: handler_name(signal.getsignal(getattr(signal, name))) for name in SIGNALS},
        "blocked": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "threads": threading.active_count(),
        "pid": os.getpid(),
    }
    if "torch" in sys.modules:
        seen.update(
            torch_threads=torch.get_num_threads(),
            interop_threads=torch.get_num_interop_threads(),
            cuda_initialized=torch.cuda.is_initialized(),
            rank_zero_only=rank_zero_only.rank,
            numpy_draw=int(numpy.random.randint(2**31)),
        )
    return seen


def act(what: str, directory: str) -> None:
    if what.startswith("exit:"):
        sys.exit(int(what[5:]))
    if what == "raise":
        raise RuntimeError("probe failed on purpose")
    if what.startswith("os_exit:"):
        os._exit(int(what[8:]))
    if what.startswith("signal:"):
        os.kill(os.getpid(), int(what[7:]))
        time.sleep(30)
    if what == "interrupt":
        raise KeyboardInterrupt
    if what == "atexit":
        atexit.register(lambda: open(os.path.join(directory, f"atexit-{os.environ['RANK']}"), "w").close())
    if what == "thread":
        late = os.path.join(directory, f"thread-{os.environ['RANK']}")
        threading.Thread(target=lambda: (time.sleep(0.5), open(late, "w").close())).start()
    if what == "note":

        def note(signum: int, frame: object) -> None:
            with open(os.path.join(directory, f"signals-{os.environ['RANK']}"), "a") as handle:
                handle.write(f"{signum}\n")
            if signum == signal.SIGTERM:
                sys.exit(143)

        for signum in (signal.SIGINT, signal.SIGUSR1, signal.SIGTERM):
            signal.signal(signum, note)
        open(os.path.join(directory, f"noting-{os.environ['RANK']}"), "w").close()
    if what in ("wait", "note"):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.05)


if __name__ == "__main__":
    directory, acts = sys.argv[1], json.loads(sys.argv[2])
    rank = os.environ["RANK"]
    record = observed()
    path = os.path.join(directory, f"rank-{rank}.json")
    with open(f"{path}.part", "w") as handle:  # whole or absent: the tests read it as soon as it is there
        json.dump(record, handle)
    os.replace(f"{path}.part", path)
    print(f"rank {rank} says hello", flush=False)  # left in the buffer: the exit must flush it, once
    act(acts[int(rank)], directory)
