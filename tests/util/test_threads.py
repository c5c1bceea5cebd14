"""util.threads.start: the thread it starts blocks every stop, and the thread that started it takes them as before."""

import signal
import threading

from snakeddp.util import threads
from tests.helpers import blocked_in


def test_a_thread_started_here_blocks_every_stop_and_its_creator_still_takes_them():
    started_with = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    done = threading.Event()
    thread = threads.start(threading.Thread(target=done.wait, daemon=True))
    try:
        assert set(threads.STOPS) <= blocked_in(thread)
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == started_with, "the creator's mask put back"
        plain = threading.Thread(target=done.wait, daemon=True)
        plain.start()
        assert not set(threads.STOPS) & blocked_in(plain), "a thread started otherwise takes them (the contrast)"
    finally:
        done.set()
