"""Threads of snakeddp's own that leave every stop to the main thread.

The kernel gives a signal sent to a process to any of its threads that does not block it, and Python runs the
handlers in the main thread only: a stop another thread took waits until the main thread next runs Python code. Where
the main thread waits in the kernel for what only that stop would end (a launcher's wait for its ranks, a Spark
driver's call into its JVM), it waits for ever. A thread started here blocks the stops, so the kernel gives them to the
main thread, whose wait they interrupt. Not for a thread that starts processes: each would inherit the mask.
"""

from __future__ import annotations

import signal
import threading

from snakeddp.util.relays import RELAYED

#: What stops a process of snakeddp's: Ctrl-C, a kill, a closed terminal, a scheduler's preemption signals, and the
#: real-time signals Snakemake's process relays them as.
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, *RELAYED)


def start(thread: threading.Thread) -> threading.Thread:
    """Start ``thread`` with the stops blocked in it (a new thread takes its creator's mask); ``thread``."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one that came meanwhile is delivered now, here
    return thread
