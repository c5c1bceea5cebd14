"""The ranks' meeting before the first step (snakeddp.training.meeting), on torch's real TCPStore.

Two-rank meetings that succeed run in every two-process training test (tests/e2e); here the ways one
fails, each within launch.hang_timeout (5 s, the least the schema allows)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from torch.distributed import TCPStore

from snakeddp.cluster.base import Layout
from snakeddp.cluster.hang import HangTimeout
from snakeddp.errors import LaunchError
from snakeddp.training.meeting import (
    CALL_S,
    MeetingError,
    StoreGone,
    check_shapes,
    meet,
    never_joined,
    torch_logs_held,
    wait_for,
)
from tests.helpers import subprocess_env

WAIT = HangTimeout(5)


def layout(rank: int, port: int) -> Layout:
    return Layout("direct", rank, rank, 2, 2, 0, 1, "127.0.0.1", port)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_rank_that_never_comes_is_named_with_the_address_the_others_waited_at():
    port, started = free_port(), time.monotonic()
    with pytest.raises(MeetingError) as raised:
        meet(layout(0, port), "127.0.0.1", port, WAIT, "base", None, env={})
    assert 5 <= time.monotonic() - started < 30
    line = str(raised.value)
    assert line.startswith(f"run base: rank 1 never came to the rendezvous at 127.0.0.1:{port}: rank 0 on ")
    assert f"(pid {os.getpid()}) waited 5 s for it" in line and "HINT: rerun" in line
    assert raised.value.record["kind"] == "never_joined" and raised.value.record["missing"] == [1]
    assert raised.value.exit_status == 69


def test_a_rank_that_cannot_reach_the_rendezvous_names_itself_and_the_address():
    port = free_port()  # nothing listens there
    with pytest.raises(MeetingError) as raised:
        meet(layout(1, port), "127.0.0.1", port, WAIT, "base", "n2", env={})
    line = str(raised.value)
    assert line.startswith(f"run base: rank 1 on {socket.gethostname()} (pid {os.getpid()}) could not reach the ")
    assert f"rendezvous at 127.0.0.1:{port} within 5 s" in line and "unset a MASTER_ADDR" in line
    assert raised.value.record["culprit"]["node"] == "n2" and raised.value.record["kind"] == "unreachable"


def test_rank_0_that_cannot_listen_says_who_holds_the_port():
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MeetingError, match=f"could not start the rendezvous on port {port}.*HINT: another"):
            meet(layout(0, port), "127.0.0.1", port, WAIT, "base", None, env={})


def test_a_rank_started_as_another_shape_is_named_before_any_collective():
    ranks = [
        {"rank": 0, "host": "a", "shape": [2, 1, 2]},
        {"rank": 1, "host": "b", "shape": [1, 2, 2]},
    ]
    said = r"rank 1 on b was started as 1 node\(s\) x 2 process\(es\).*rank 0 on a as 2 x 1"
    with pytest.raises(LaunchError, match=said):
        check_shapes(ranks)
    check_shapes(ranks[:1])


def test_what_torch_logs_while_the_ranks_meet_is_dropped_when_the_meeting_fails_and_kept_when_it_works(capfd):
    with torch_logs_held():
        os.write(2, b"kept\n")
    with pytest.raises(MeetingError), torch_logs_held():
        os.write(2, b"dropped\n")
        raise MeetingError("line", {})
    assert capfd.readouterr().err == "kept\n"


def test_the_nodes_a_launcher_placed_the_missing_ranks_on_are_named_and_kept():
    mine = {"rank": 0, "host": "a", "node": "n1", "pid": 5, "shape": [2, 2, 4]}
    error = never_joined("base", mine, [2, 3], "10.0.0.1", 29500, 180, {2: "n2", 3: "n2"})
    said = "run base: ranks 2-3 (placed on node n2) never came to the rendezvous at 10.0.0.1:29500: rank 0 on a"
    assert str(error).startswith(said)
    assert error.record["missing_nodes"] == ["n2"]


HOST = """
import time
from datetime import timedelta
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
print(store.port, flush=True)
time.sleep(600)
"""


@pytest.fixture
def hosted() -> Iterator[tuple[subprocess.Popen, int]]:
    """A store hosted by a process of its own (rank 0's, to the other ranks), and its port."""
    host = subprocess.Popen([sys.executable, "-c", HOST], stdout=subprocess.PIPE, text=True, env=subprocess_env())
    try:
        yield host, int(host.stdout.readline())
    finally:
        host.send_signal(signal.SIGCONT)
        host.kill()
        host.wait()


def stop(host: subprocess.Popen) -> None:
    """SIGSTOP the host and wait until every one of its threads is stopped: the signal is delivered
    asynchronously, and a thread still running on another core could answer one more call (CI once did)."""
    host.send_signal(signal.SIGSTOP)
    tasks = f"/proc/{host.pid}/task"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = [open(f"{tasks}/{tid}/stat").read().rsplit(")", 1)[1].split()[0] for tid in os.listdir(tasks)]
        if all(state in "Tt" for state in states):
            return
        time.sleep(0.005)
    raise AssertionError(f"the store's host (pid {host.pid}) did not stop within 10 s")


def client(port: int) -> TCPStore:
    return TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))


def test_a_store_that_answers_late_but_before_the_deadline_is_waited_for(hosted):
    """A store held up longer than one call's bound (CALL_S: a stopped host here, a machine so busy that rank 0's
    own store answered late on CI) is still waited for until the meeting's deadline."""
    host, port = hosted
    store = client(port)
    store.set("k", "v")
    stop(host)
    threading.Timer(CALL_S + 2, host.send_signal, (signal.SIGCONT,)).start()
    started = time.perf_counter()
    assert wait_for(store, ["k"], started + 30)
    assert time.perf_counter() - started >= CALL_S + 1


def test_a_store_that_never_answers_is_gone_by_the_deadline(hosted):
    host, port = hosted
    store = client(port)
    stop(host)
    started = time.perf_counter()
    with pytest.raises(StoreGone):
        wait_for(store, ["k"], started + CALL_S + 2)
    assert time.perf_counter() - started < CALL_S + 4
