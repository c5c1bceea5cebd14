"""tools/progress.sh, which tools/setup.sh runs its long steps under: never 10 s without a line, the
step's exit status kept, and nothing left running after Ctrl-C."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import time

from tests.helpers import REPO, as_typed_in_a_terminal


def bash(script: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        ["bash", "-c", f"source tools/progress.sh; {script}"], cwd=REPO, stdout=subprocess.PIPE, text=True, **kwargs
    )


def test_a_long_step_is_never_10_seconds_without_a_line_and_keeps_its_status():
    # Each line is stamped as it arrives: no gap of 10 s, the first tick saying when it came, the status last.
    # (Exact counts of ticks depend on how the machine schedules the sleeps; the gaps do not.) The first gap is
    # taken from a line said just before the step, as set-up's own are, not from the Popen: bash's start and the
    # source of progress.sh are no step's, and a loaded 2-core machine takes a good part of a second over them.
    done = bash("echo begins; progress 'compiling' sleep 10; echo status=$?")
    assert done.stdout.readline() == "begins\n"
    arrived, lines = [time.monotonic()], []
    for line in done.stdout:
        arrived.append(time.monotonic())
        lines.append(line.rstrip("\n"))
    done.wait(timeout=60)
    # The tick's seconds are whole seconds since the step began (date +%s): 8 or, on a busy machine, 9.
    first = re.fullmatch(r"setup: still compiling \((\d+) s\)", lines[0])
    assert first and abs(int(first[1]) - (arrived[1] - arrived[0])) <= 1 and lines[-1] == "status=0", lines
    assert all(line.startswith("setup: still compiling (") for line in lines[:-1]), lines
    assert max(b - a for a, b in itertools.pairwise(arrived)) < 10, arrived
    failed = bash("PROGRESS_EVERY=1; progress 'x' bash -c 'sleep 2.5; exit 3'; echo status=$?")
    lines = failed.communicate(timeout=60)[0].splitlines()
    assert (
        lines[-1] == "status=3" and len(lines) >= 2 and all(line.startswith("setup: still x (") for line in lines[:-1])
    )


def test_ctrl_c_leaves_no_ticker_behind():
    running = bash(
        "PROGRESS_EVERY=1; progress 'waiting' sleep 60", start_new_session=True, preexec_fn=as_typed_in_a_terminal
    )
    assert running.stdout.readline().startswith("setup: still waiting")
    os.killpg(running.pid, signal.SIGINT)
    running.wait(timeout=10)
    # The ticker stops its sleep when it is stopped: the group empties well before the next tick.
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        try:
            os.killpg(running.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise AssertionError("a process of the set-up's group outlived Ctrl-C")
