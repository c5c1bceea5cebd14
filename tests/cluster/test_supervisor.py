"""snakeddp.cluster.supervisor, the local profile's launcher, with real processes (no torch needed).

Each rank runs a few lines of Python that report what they saw in a file of their own; the
supervisor is started as the launcher starts it, ``python -m snakeddp.cluster.supervisor``.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from snakeddp.cluster import supervisor
from tests.helpers import all_gone

SUPERVISOR = [sys.executable, "-m", "snakeddp.cluster.supervisor", "--nproc-per-node=2"]

# A rank: records its variables, then does what argv[2] says for its rank ("exit:N"; "fail:N":
# exits N once rank 0 has started; "sleep"; "deaf": ignores SIGTERM; "slow-save": on USR1 exits
# 75 after 1.5 s; "int:N": exits N on SIGINT, which the others note and ignore). Every signal it gets is
# appended to its file, as JSON lines. It takes its signals one at a time (blocked, then sigtimedwait):
# with handlers, a SIGTERM that came while SIGINT's handler wrote its line would run inside that
# handler and exit before the line was written.
RANK = r"""
import json, os, signal, sys, time
CAUGHT = {signal.SIGTERM, signal.SIGUSR1, signal.SIGINT}
signal.pthread_sigmask(signal.SIG_BLOCK, CAUGHT)
out = os.path.join(sys.argv[1], f"rank-{os.environ['RANK']}.jsonl")
def note(**record):
    with open(out, "a") as f:
        f.write(json.dumps(record) + "\n")
act = json.loads(sys.argv[2])[int(os.environ["RANK"])]
def on_signal(signum):
    note(signal=signum)
    if signum == signal.SIGUSR1:
        if act == "slow-save":
            time.sleep(1.5)
            note(saved=True)
        sys.exit(75)
    if signum == signal.SIGTERM and act != "deaf":
        sys.exit(143)
    if signum == signal.SIGINT and act.startswith("int:"):
        sys.exit(int(act[4:]))
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
        "SNAKEDDP_LAUNCH_ID")
note(env={k: os.environ.get(k) for k in keys}, pid=os.getpid())
if act.startswith("exit:"):
    sys.exit(int(act[5:]))
while act.startswith("fail:"):
    if os.path.exists(os.path.join(sys.argv[1], "rank-0.jsonl")):
        sys.exit(int(act[5:]))
    time.sleep(0.01)
deadline = time.monotonic() + 30
while (left := deadline - time.monotonic()) > 0:
    got = signal.sigtimedwait(CAUGHT, left)
    if got is not None:
        on_signal(got.si_signo)
note(timeout=True)
"""


def records(directory, rank):
    path = directory / f"rank-{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def start(tmp_path, acts, *options):
    """The supervisor in a process group of its own, as a terminal's foreground job is."""
    argv = [*SUPERVISOR, *options, "--", sys.executable, "-c", RANK, str(tmp_path), json.dumps(acts)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_started(tmp_path, ranks=2, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(records(tmp_path, rank) for rank in range(ranks)):
            return
        time.sleep(0.05)
    raise AssertionError("the ranks did not start")


def test_every_rank_gets_torchruns_variables_and_one_rendezvous(tmp_path):
    process = start(tmp_path, ["exit:0", "exit:0"])
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    seen = [records(tmp_path, rank)[0]["env"] for rank in (0, 1)]
    assert [(env["RANK"], env["LOCAL_RANK"]) for env in seen] == [("0", "0"), ("1", "1")]
    for env in seen:
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_RANK"]) == ("2", "2", "0")
        assert env["MASTER_ADDR"] == "127.0.0.1" and 1024 <= int(env["MASTER_PORT"]) <= 65535
    assert seen[0]["MASTER_PORT"] == seen[1]["MASTER_PORT"]
    assert seen[0]["SNAKEDDP_LAUNCH_ID"] == seen[1]["SNAKEDDP_LAUNCH_ID"]
    assert stderr == ""


def test_the_reserved_port_is_kept_from_others_but_rank_0s_store_can_listen_on_it():
    import datetime

    import torch.distributed as dist

    held = supervisor.reserve_port()
    port = held.getsockname()[1]
    with socket.socket() as other, pytest.raises(OSError, match="in use"):
        other.bind(("127.0.0.1", port))  # anyone else asking for it
    store = dist.TCPStore("127.0.0.1", port, 1, True, timeout=datetime.timedelta(seconds=10))  # as rank 0 does
    store.set("rendezvous", "ok")
    assert store.get("rendezvous") == b"ok"
    held.close()


def test_a_killed_supervisor_takes_its_ranks_along(tmp_path):
    """kill -9 of the supervisor (or of snakeddp.launch, which takes the supervisor): the ranks die
    too, even ones that have not yet reached their own die_with_parent (these never call it)."""
    process = start(tmp_path, ["sleep", "sleep"])
    wait_started(tmp_path)
    pids = [records(tmp_path, rank)[0]["pid"] for rank in (0, 1)]
    process.kill()
    process.wait(timeout=60)
    assert all_gone(pids, within=20), "ranks outlived their killed supervisor"


def test_a_configured_port_is_used(tmp_path):
    process = start(tmp_path, ["exit:0", "exit:0"], "--master-port=29517")
    assert process.wait(timeout=60) == 0
    assert {records(tmp_path, rank)[0]["env"]["MASTER_PORT"] for rank in (0, 1)} == {"29517"}


def test_the_first_failure_stops_the_others_and_is_the_exit_code(tmp_path):
    process = start(tmp_path, ["sleep", "fail:3"])
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 3
    assert stderr.splitlines() == [
        f"snakeddp.cluster.supervisor: rank 1 (pid {records(tmp_path, 1)[0]['pid']}) exited with 3; "
        "stopping the other 1 process(es)"
    ]
    assert {"signal": signal.SIGTERM} in records(tmp_path, 0)  # asked to stop, as torchrun's agent does
    assert not any("timeout" in r for r in records(tmp_path, 0))


def test_a_process_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path):
    started = time.monotonic()
    process = start(tmp_path, ["deaf", "fail:1"], "--stop-timeout=1")
    process.communicate(timeout=60)
    assert process.returncode == 1 and time.monotonic() - started < 20
    assert {"signal": signal.SIGTERM} in records(tmp_path, 0)
    assert not any("timeout" in r for r in records(tmp_path, 0))  # SIGKILL, long before its own deadline


def test_signals_reach_every_rank_and_a_slow_save_is_not_cut_short(tmp_path):
    """A preemption signal goes to every rank; the one that saves for longer than --stop-timeout
    is not killed, because its peer's exit 75 is the same signal's doing, not a failure."""
    process = start(tmp_path, ["sleep", "slow-save"], "--stop-timeout=0.5")
    wait_started(tmp_path)
    process.send_signal(signal.SIGUSR1)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 75, stderr
    assert records(tmp_path, 0)[1:] == [{"signal": signal.SIGUSR1}]
    assert records(tmp_path, 1)[1:] == [{"signal": signal.SIGUSR1}, {"saved": True}]
    assert "stopping" not in stderr


def test_after_ctrl_c_every_rank_gets_it_once_and_one_that_fails_stops_the_others_quietly(tmp_path):
    """Ctrl-C signals the terminal's whole foreground process group: the ranks, in sessions of their
    own, get it once, from the supervisor. Rank 1 exits 1 on it; rank 0 carries on and is stopped
    with SIGTERM. The exits are the interrupt's doing: no report line."""
    process = start(tmp_path, ["sleep", "int:1"])
    wait_started(tmp_path)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1 and stderr == ""
    assert records(tmp_path, 0)[1:] == [{"signal": signal.SIGINT}, {"signal": signal.SIGTERM}]
    assert records(tmp_path, 1)[1:] == [{"signal": signal.SIGINT}]


@pytest.mark.parametrize("argv", [[], ["--nproc-per-node=0", "--", "true"], ["--nproc-per-node=2"]])
def test_a_bad_command_line_is_refused(argv):
    result = subprocess.run(
        [sys.executable, "-m", "snakeddp.cluster.supervisor", *argv], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "error:" in result.stderr


@pytest.mark.parametrize("launcher", ["direct", "torchrun"])
def test_a_stop_passed_on_to_a_launcher_child_that_has_ended_is_dropped_not_raised(launcher):
    """The launcher's signal handler runs between any two of its lines: after child.wait() has reaped the child,
    too. Passing the stop on then finds no process; the handler must not raise that into the job's log."""
    from snakeddp.launch import deliver

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert child.wait(timeout=60) == 0  # reaped: its pid names no process
    deliver(child, launcher, signal.SIGTERM)
