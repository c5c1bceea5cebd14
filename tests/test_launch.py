"""The launcher's own threads leave every stop to its main thread, where Python runs the handlers."""

import os
import signal
import threading
from pathlib import Path

from snakeddp.cluster.lifecycle import FORWARDED
from snakeddp.cluster.supervisor import Supervisor
from snakeddp.launch import relay_stderr


def blocked_in(thread: threading.Thread) -> set[int]:
    """The signals ``thread`` blocks, from its task's SigBlk mask in /proc."""
    for line in Path(f"/proc/self/task/{thread.native_id}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            mask = int(line.split()[1], 16)
            return {signum for signum in range(1, 65) if mask >> (signum - 1) & 1}
    raise AssertionError("no SigBlk line")


def test_the_stderr_relay_thread_blocks_the_stops_it_was_given(tmp_path):
    """A stop the kernel gave the relay thread would wait until the main thread's wait for the ranks returned."""
    read, write = os.pipe()
    stops = (*FORWARDED, signal.SIGHUP)
    with open(read, "rb") as stream:
        relay = threading.Thread(target=relay_stderr, args=(stream, tmp_path / "failure.txt", stops), daemon=True)
        relay.start()
        os.write(write, b"a rank's line\n")  # it is reading: past its first line
        try:
            assert set(stops) <= blocked_in(relay)
            assert not set(stops) & blocked_in(threading.main_thread()), "the main thread still takes them"
        finally:
            os.close(write)
            relay.join(timeout=10)
    assert not relay.is_alive()


def test_the_supervisors_kill_timer_thread_blocks_the_stops_it_passes_on():
    supervisor = Supervisor(["true"], [], stop_timeout=60)
    before = set(threading.enumerate())
    supervisor.stop([], terminate=False)
    (timer,) = set(threading.enumerate()) - before
    try:
        assert set(FORWARDED) <= blocked_in(timer)
        assert not set(FORWARDED) & blocked_in(threading.main_thread()), "the main thread's mask put back"
    finally:
        timer.cancel()
