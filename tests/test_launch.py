"""The launcher's own threads leave every stop to its main thread, where Python runs the handlers."""

import os
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil

from snakeddp.cluster.lifecycle import FORWARDED
from snakeddp.cluster.supervisor import Supervisor
from snakeddp.launch import followed, relay_stderr


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


def test_a_process_left_holding_the_ranks_stderr_is_named_and_not_waited_for_and_its_hint_ends_it(tmp_path, capfd):
    """The ranks' launcher ends; a child it left behind (backgrounded, orphaned) keeps their stderr open."""
    child = subprocess.Popen(
        ["sh", "-c", "echo a rank says >&2; sleep 600 & echo $! > left.pid; exit 3"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    assert followed(child, tmp_path / "failure.txt", FORWARDED, drain_s=1) == 3
    left = int((tmp_path / "left.pid").read_text())
    err = capfd.readouterr().err
    assert "a rank says" in err, "what was in the pipe passed on"
    (line,) = [line for line in err.splitlines() if line.startswith("snakeddp.launch:")]
    assert f"(pid {left})" in line and "HINT: `kill " in line
    subprocess.run(shlex.split(line.split("HINT: `", 1)[1].split("`", 1)[0]), check=True)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(left) and psutil.Process(left).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "still there"
        time.sleep(0.05)
