"""Whether this process may fork now: forking after ``import torch`` is safe only while the process
has one thread and no CUDA context, and a child must not share a descriptor it does not know of.
Checked before every fork, never assumed; what fails is said in one clause (``NotForkable``)."""

from __future__ import annotations

import os
import sys
import threading
import time

from snakeddp.util.handoff import is_open

# How long the warm process waits for native threads an import left to end before it gives up forking.
NATIVE_THREADS_WAIT_S = 1.0


class NotForkable(Exception):
    """Why the jobs or ranks start cold: one clause, said once by whoever forks them."""


def native_threads() -> list[str]:
    """The names (comm) of this process's threads other than the calling one, as the kernel lists them."""
    me = str(threading.get_native_id())
    names = []
    for task in os.listdir("/proc/self/task"):
        if task == me:
            continue
        try:
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as comm:
                names.append(comm.read().strip() or task)
        except OSError:
            continue  # it ended while we looked
    return names


def open_fds() -> set[int]:
    """This process's file descriptors beyond stdio (the one listdir itself opened is closed again)."""
    return {fd for fd in map(int, os.listdir("/proc/self/fd")) if fd > 2 and is_open(fd)}


def same_interpreter(executable: str) -> bool:
    """Whether ``executable`` is this very interpreter (a child forked from it runs no other)."""
    try:
        return os.path.samefile(executable, sys.executable)
    except OSError:
        return False


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
    with open("/proc/self/maps", encoding="utf-8") as maps:
        if any("libcuda.so" in line for line in maps):
            raise NotForkable("the CUDA driver (libcuda) is loaded in the warm process")
    stray = open_fds() - own_fds
    if stray:
        raise NotForkable(f"importing {imported} opened file descriptors {sorted(stray)}: a fork would share them")
