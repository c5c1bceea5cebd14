"""snakeddp.cluster.warm: ranks forked by the supervisor, with real processes.

The ranks are ``python -m tests.cluster.rank_probe``, which records what a process can observe
about its start; the same start, warm (``--fork-ranks``) and cold, must record the same.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from snakeddp.cluster import warm
from snakeddp.errors import LaunchError
from tests.helpers import REPO, all_gone, subprocess_env

SUPERVISOR = [sys.executable, "-m", "snakeddp.cluster.supervisor", "--nproc-per-node=2"]
PROBE = [sys.executable, "-m", "tests.cluster.rank_probe"]
# Different in every start, warm or cold: the rendezvous port, the launch id, and what says which it was.
PER_START = ("MASTER_PORT", "SNAKEDDP_LAUNCH_ID", warm.RANK_START)


def start(directory, acts, *options, fork=True, torch=False, log=None, **env):
    argv = [*SUPERVISOR, *(["--fork-ranks"] if fork else []), *options, "--", *PROBE, str(directory), json.dumps(acts)]
    out = log.open("w") if log else subprocess.PIPE
    return subprocess.Popen(
        argv,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT if log else subprocess.PIPE,
        text=True,
        env=subprocess_env(PROBE_TORCH="1" if torch else "0", **env),
        start_new_session=True,
    )


def record(directory, rank):
    return json.loads((directory / f"rank-{rank}.json").read_text())


def wait_recorded(directory, ranks=2, timeout=60):
    deadline = time.monotonic() + timeout
    while not all((directory / f"rank-{rank}.json").exists() for rank in range(ranks)):
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.05)


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_forked_rank_observes_what_a_fresh_process_observes(tmp_path, sigint):
    """argv, environment (thread settings, CUDA_VISIBLE_DEVICES, SNAKEDDP_*), working directory,
    umask, resource limits, stdio, session, parent-death signal, signal handlers and mask, thread
    pool sizes, Lightning's rank and a numpy stream of its own: the same warm as cold. Also where the
    launch inherits SIGINT ignored (nohup, a script's `&`): the supervisor handles it, so a cold rank's
    exec resets it."""
    # Inherited by the launch this test starts (conftest restores it afterwards); "default" set too, not taken
    # from the suite's own start: under nohup or a script's `&` it is ignored.
    signal.signal(signal.SIGINT, signal.SIG_IGN if sigint == "ignored" else signal.default_int_handler)
    seen = {}
    for fork in (True, False):
        ranks, log = tmp_path / "ranks", tmp_path / "job.log"  # the same paths both times: argv and stdio agree
        ranks.mkdir()
        # Buffered stdout (no PYTHONUNBUFFERED): each rank's line is written once, whole, by its exit's flush.
        # Written through, its text and newline are two writes, which the other rank's can come between
        # (CI once read "rank 1 says hellorank 0 says hello").
        process = start(
            ranks, ["exit:0", "exit:0"], fork=fork, torch=True, log=log, OMP_NUM_THREADS="2", MKL_NUM_THREADS="2",
            PYTHONUNBUFFERED="",
        )  # fmt: skip
        assert process.wait(timeout=120) == 0, log.read_text()
        output = log.read_text()
        assert sorted(output.splitlines()) == ["rank 0 says hello", "rank 1 says hello"], output  # once each
        seen[fork] = [record(ranks, rank) for rank in (0, 1)]
        shutil.rmtree(ranks)
    draws = [seen_by["numpy_draw"] for seen_by in seen[True]]
    assert draws[0] != draws[1], "each forked rank draws its own numpy stream, as fresh ones do"
    for rank, (forked, fresh) in enumerate(zip(seen[True], seen[False], strict=True)):
        assert (forked["env"][warm.RANK_START], fresh["env"][warm.RANK_START]) == ("warm", "cold")
        assert forked["pid"] != fresh["pid"]
        for seen_by in (forked, fresh):
            seen_by["env"] = {k: v for k, v in seen_by["env"].items() if k not in PER_START}
            del seen_by["pid"], seen_by["numpy_draw"]
        assert forked == fresh
        assert (forked["torch_threads"], forked["rank_zero_only"], forked["cuda_initialized"]) == (2, rank, False)
        assert forked["handlers"]["SIGINT"] == "default_int_handler"  # not the supervisor's forwarding
        assert forked["handlers"]["SIGTERM"] == repr(signal.SIG_DFL) and not forked["blocked"]


# What a fresh `python -m` rank leaves as its exit status, and the supervisor's code for it.
EXITS = {
    "exit:3": 3,  # sys.exit(3)
    "raise": 1,  # an uncaught exception
    "os_exit:7": 7,  # os._exit(7): no cleanup, the status as given
    f"signal:{int(signal.SIGKILL)}": 128 + signal.SIGKILL,  # killed by a signal: 128 + N, as a shell says
    "interrupt": 128 + signal.SIGINT,  # an unhandled KeyboardInterrupt: Python exits by SIGINT
}


@pytest.mark.parametrize("act", list(EXITS))
@pytest.mark.parametrize("fork", [True, False], ids=["warm", "cold"])
def test_a_ranks_exit_status_is_a_fresh_processs(tmp_path, act, fork):
    process = start(tmp_path, ["wait", act], fork=fork)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == EXITS[act], stderr
    pid = record(tmp_path, 1)["pid"]
    if EXITS[act] > 128:  # a signal's: named, as the rank itself could not say why it ended
        name = signal.Signals(EXITS[act] - 128).name
        (line,) = [line for line in stderr.splitlines() if f"rank 1 (pid {pid}) was killed by {name}" in line]
        assert ("kill -9: `dmesg` says which" in line) == (name == "SIGKILL") and line.count("HINT: rerun") == 1, line
    else:
        assert f"rank 1 (pid {pid}) exited with {EXITS[act]}" in stderr
    assert "cold" not in stderr  # started as asked
    if act == "raise":
        # The traceback begins at runpy's frames, as a fresh rank's does: none of the forker's.
        assert "RuntimeError: probe failed on purpose" in stderr and "snakeddp/forking" not in stderr
    if act != "os_exit:7" and not act.startswith("signal"):
        assert "rank 1 says hello" in stdout  # flushed at exit; os._exit and a kill flush nothing, cold or warm


def test_a_forked_rank_runs_atexit_callbacks_and_waits_for_its_threads(tmp_path):
    process = start(tmp_path, ["atexit", "thread"])
    assert process.wait(timeout=60) == 0
    assert (tmp_path / "atexit-0").exists()
    assert (tmp_path / "thread-1").exists(), "exited before its non-daemon thread ended"


def noted(directory, rank):
    path = directory / f"signals-{rank}"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def until(condition, process, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline and process.poll() is None, what
        time.sleep(0.05)


def test_ctrl_c_and_preemption_signals_reach_each_forked_rank_once(tmp_path):
    """Ctrl-C signals the foreground process group: the forked ranks, in sessions of their own, get
    SIGINT once, from the supervisor; SIGUSR1 (a scheduler's warning) and SIGTERM (Snakemake stopping
    the job) are passed on once each too."""
    process = start(tmp_path, ["note", "note"])
    until(lambda: all((tmp_path / f"noting-{rank}").exists() for rank in (0, 1)), process, "the ranks did not start")
    os.killpg(process.pid, signal.SIGINT)
    until(lambda: all(noted(tmp_path, rank) for rank in (0, 1)), process, "SIGINT did not reach both ranks")
    process.send_signal(signal.SIGUSR1)
    until(lambda: all(len(noted(tmp_path, rank)) == 2 for rank in (0, 1)), process, "nor SIGUSR1")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143 and "stopping" not in stderr, stderr
    expected = [signal.SIGINT, signal.SIGUSR1, signal.SIGTERM]
    assert [noted(tmp_path, rank) for rank in (0, 1)] == [expected, expected]


def test_a_killed_supervisor_takes_its_forked_ranks_along(tmp_path):
    process = start(tmp_path, ["wait", "wait"])
    wait_recorded(tmp_path)
    pids = [record(tmp_path, rank)["pid"] for rank in (0, 1)]
    assert all(psutil.Process(pid).ppid() == process.pid for pid in pids)
    process.kill()
    process.wait(timeout=60)
    assert all_gone(pids, within=20), "forked ranks outlived their killed supervisor"


@pytest.mark.parametrize(
    ("command", "env", "why"),
    [
        (PROBE, {"PROBE_THREAD": "1"}, "the warm process runs 1 Python thread(s) (probe-import-thread)"),
        ([sys.executable, "-c", "import tests.cluster.rank_probe"], {}, "the ranks' command is not `python -m MODULE`"),
        (["/bin/sh", "-c", "exit 0"], {}, "the ranks' command is not `python -m MODULE`"),
        (["/bin/sh", "-m", "x"], {}, "the ranks run another interpreter"),
    ],
    ids=["thread", "not-a-module", "not-python", "elsewhere"],
)
def test_what_cannot_be_forked_starts_cold_and_says_why_once(tmp_path, command, env, why):
    argv = [*SUPERVISOR, "--fork-ranks", "--", *command]
    if command is PROBE:
        argv += [str(tmp_path), json.dumps(["exit:0", "exit:0"])]
    result = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=60, env=subprocess_env(PROBE_TORCH="0", **env)
    )
    lines = [line for line in result.stderr.splitlines() if "cold" in line]
    assert len(lines) == 1 and why in lines[0] and "HINT:" in lines[0], result.stderr
    if command is PROBE:
        assert result.returncode == 0
        assert {record(tmp_path, rank)["env"][warm.RANK_START] for rank in (0, 1)} == {"cold"}


@pytest.mark.parametrize(("value", "on"), [(None, True), ("1", True), ("0", False)])
def test_the_switch(value, on):
    assert warm.enabled({} if value is None else {warm.WARM_START: value}) is on


def test_a_bad_switch_value_is_one_line_with_a_hint():
    with pytest.raises(LaunchError, match=r"SNAKEDDP_WARM_START='yes' is neither 1 nor 0\. HINT: "):
        warm.enabled({warm.WARM_START: "yes"})
