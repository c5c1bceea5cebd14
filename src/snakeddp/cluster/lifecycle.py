"""Tie a training process's life to its launcher's, so no rank outlives a killed run."""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1
PREEMPTED_EXIT_CODE = 75  # EX_TEMPFAIL, "try again": what a preempted run wants
# What a launcher passes on to the processes it started (snakeddp.launch, the supervisor).
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent (torchrun, srun's step, orted) dies.

    Without it, `kill -9` of a launcher leaves its ranks training on their own, writing into a
    run directory that the next attempt is about to use. Returns False where unsupported.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
