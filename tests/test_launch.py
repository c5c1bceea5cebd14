"""The launcher and the supervisor: their own threads leave every stop to the main thread, where Python runs the
handlers; and the launcher does not wait for a process the ranks left behind."""

import shlex
import subprocess
import threading
import time

import psutil

from snakeddp.cluster.supervisor import Supervisor
from snakeddp.launch import HELD, RELAY, followed
from snakeddp.util import threads
from tests.helpers import blocked_in


def test_the_thread_that_passes_the_ranks_stderr_on_blocks_every_stop(tmp_path):
    """A stop the kernel gave the relay thread would wait until the main thread's wait for the ranks returned."""
    child = subprocess.Popen(["sh", "-c", "echo started >&2; sleep 2"], stderr=subprocess.PIPE)
    masks: list[set[int]] = []

    def look() -> None:  # while followed waits
        deadline = time.monotonic() + 10
        while not masks and time.monotonic() < deadline:
            relay = [thread for thread in threading.enumerate() if thread.name == RELAY]
            masks.extend(blocked_in(thread) for thread in relay)
            time.sleep(0.01)

    looking = threading.Thread(target=look)
    looking.start()
    assert followed(child, tmp_path / "failure.txt") == 0
    looking.join()
    assert masks and set(threads.STOPS) <= masks[0]
    assert set(HELD) <= masks[0], "every signal the launcher acts on (threads.STOPS must keep up with it)"
    assert not set(threads.STOPS) & blocked_in(threading.main_thread()), "the main thread still takes them"


def test_the_supervisors_kill_timer_thread_blocks_every_stop():
    supervisor = Supervisor(["true"], [], stop_timeout=60)
    before = set(threading.enumerate())
    supervisor.stop([], terminate=False)
    (timer,) = set(threading.enumerate()) - before
    try:
        assert set(threads.STOPS) <= blocked_in(timer)
        assert not set(threads.STOPS) & blocked_in(threading.main_thread()), "the main thread's mask put back"
    finally:
        timer.cancel()


def test_a_process_left_holding_the_ranks_stderr_is_named_and_not_waited_for_and_its_hint_ends_it(tmp_path, capfd):
    """The ranks' launcher ends; a child it left behind (backgrounded, orphaned) keeps their stderr open."""
    child = subprocess.Popen(
        ["sh", "-c", "echo a rank says >&2; sleep 600 & echo $! > left.pid; exit 3"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    assert followed(child, tmp_path / "failure.txt", drain_s=1) == 3
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
