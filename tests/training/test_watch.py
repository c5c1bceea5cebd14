"""What a rank's watch reads besides the run's store (snakeddp.training.watch); the watch itself runs in every
two-process training, and tests/e2e/test_hang.py stops a rank under it."""

from __future__ import annotations

import signal
import socket
import subprocess
import time

import psutil

from snakeddp.cluster.hang import Position
from snakeddp.training.watch import process_state, readable


def position(pid: int, host: str) -> Position:
    return Position(1, host, pid, None, 10, 0, "backward", 0.01, 0.0, 0.0)


def test_the_kernel_says_the_rank_the_others_wait_for_is_stopped_when_it_runs_here():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        here = socket.gethostname()
        while psutil.Process(sleeper.pid).status() != psutil.STATUS_SLEEPING:  # exec'd and sleeping
            time.sleep(0.01)
        assert process_state(position(sleeper.pid, here)) is None  # sleeping: nothing to add
        sleeper.send_signal(signal.SIGSTOP)
        while psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED:  # the signal lands in its time
            time.sleep(0.01)
        assert process_state(position(sleeper.pid, here)) == "its process is stopped (SIGSTOP or a debugger)"
        assert process_state(position(sleeper.pid, "another-host")) is None
    finally:
        sleeper.kill()
        sleeper.wait()
    assert process_state(position(sleeper.pid, here)) == "its process is gone"


def test_only_posts_that_are_positions_are_judged():
    good = position(7, "h")
    assert readable([good.to_json().encode(), b"garbage", b"{}"]) == [good]
