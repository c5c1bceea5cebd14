"""A hang's evidence taken from real processes (snakeddp.training.evidence, snakeddp.training.gather): a Python
process stopped by SIGSTOP gives its stack through its trap and is left stopped; the flight recorder's dump of a
real gloo process group; the folder a judge writes from every rank's post to a real TCPStore."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from torch.distributed import TCPStore

from snakeddp.run import attempt as runstate
from snakeddp.run import tries
from snakeddp.run.layout import HANG_STACKS, RunPaths
from snakeddp.training.evidence import Trap, flight_record, gpu_state, own_stack, take_stack
from snakeddp.training.gather import GPU, Gathering, Verdict, folder
from tests.gpu_standin import StandIn
from tests.training.test_meeting import free_port

# A rank stand-in: sets its trap, says so, then stops itself deep in a function of a recognisable name.
STOPS_ITSELF = """
import os, signal, sys, threading, time
from snakeddp.training.evidence import Trap

def waits_in_a_collective_that_never_ends():
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()  # the kernel may pick any thread
    Trap()
    print("trapped", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    sys.stdin.read()

waits_in_a_collective_that_never_ends()
"""


@pytest.fixture
def stopped():
    """A Python process stopped by SIGSTOP inside waits_in_a_collective_that_never_ends."""
    child = subprocess.Popen(
        [sys.executable, "-c", STOPS_ITSELF], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline() == "trapped\n"
    process = psutil.Process(child.pid)
    deadline = time.monotonic() + 30
    while process.status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline, "it never stopped"
        time.sleep(0.02)
    yield child
    child.kill()
    child.wait()


def test_a_stopped_process_gives_its_stack_through_its_trap_and_is_left_stopped(stopped):
    stack, how = take_stack(stopped.pid)
    assert stack is not None, how
    # The main thread ran the handler, before it ran on: its frames are where it stopped.
    current = stack.split("Current thread", 1)[1].split("\n\n", 1)[0]
    assert "waits_in_a_collective_that_never_ends" in current, stack
    assert how == "taken by signal (stopped: continued for the dump, and stopped again)"
    deadline = time.monotonic() + 5
    while psutil.Process(stopped.pid).status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline, "not stopped again"
        time.sleep(0.02)
    again, _ = take_stack(stopped.pid)  # a second signal: only what it wrote then
    assert again is not None and again.count("Current thread") == 1


# A process that ends right after its dump: its trap's handler then the signal's default action (it terminates).
ENDS_AFTER_ITS_DUMP = """
import faulthandler, os, signal, sys
from snakeddp.training.evidence import STACK_SIGNAL, Trap

def ends_after_its_dump():
    trap = Trap()
    faulthandler.unregister(STACK_SIGNAL)
    faulthandler.register(STACK_SIGNAL, file=trap.file, all_threads=True, chain=True)
    print("trapped", flush=True)
    sys.stdin.read()

ends_after_its_dump()
"""


def test_the_stack_of_a_process_that_ends_right_after_its_dump_is_kept():
    child = subprocess.Popen(
        [sys.executable, "-c", ENDS_AFTER_ITS_DUMP], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "trapped\n"
        stack, how = take_stack(child.pid)
        assert child.wait(timeout=10) == -(signal.SIGRTMIN + 3), "it ended by the signal"
        assert stack is not None and "ends_after_its_dump" in stack, how
    finally:
        child.kill()
        child.wait()


def test_a_process_without_a_trap_or_gone_is_said_not_taken_and_why():
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        stack, why = take_stack(plain.pid)
        assert stack is None and "no stack trap" in why
        assert plain.poll() is None, "a process without a trap is not sent the signal"
    finally:
        plain.kill()
        plain.wait()
    assert take_stack(plain.pid) == (None, "its process is gone")


def test_a_rank_takes_its_own_stack_and_its_trap_leaves_no_file():
    trap = Trap()
    try:
        assert "test_a_rank_takes_its_own_stack_and_its_trap_leaves_no_file" in own_stack()
        assert os.readlink(f"/proc/self/fd/{trap.file.fileno()}").endswith("(deleted)")
    finally:
        trap.close()


FLIGHT = """
import os, pickle, sys
import torch, torch.distributed as dist
from snakeddp.training.evidence import flight_record
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
dist.all_reduce(torch.ones(4))
record = flight_record()
sys.stdout.buffer.write(record if record is not None else b"none")
# Torch's threads for the group joined before the interpreter ends: left to exit, one was destroyed running now and
# then ("terminate called without an active exception", exit -6, in one CI run).
dist.destroy_process_group()
"""


@pytest.mark.parametrize("size", ["0", "64"])
def test_the_flight_recorder_is_dumped_where_its_buffer_is_set(size):
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": size}
    done = subprocess.run([sys.executable, "-c", FLIGHT, str(free_port())], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    if size == "0":
        assert done.stdout == b"none"
        return
    record = pickle.loads(done.stdout)
    assert [entry["profiling_name"] for entry in record["entries"]] == ["gloo:all_reduce"]


def test_on_the_cpu_the_gpu_state_says_none_and_why():
    assert gpu_state("cpu", 1) == {"rank": 1, "device": "cpu", "state": None, "why": "it trains on the CPU"}
    assert flight_record() is None or "TORCH_FR_BUFFER_SIZE" in os.environ


def test_the_judge_writes_every_ranks_stack_from_the_store_and_the_culprits_taken_by_signal(
    stopped,
    tmp_path,
):
    """Rank 0 judges; rank 1 (the stopped process, silent) is on its host, so rank 0 takes its stack; rank 2
    answers from another host and posts its own; rank 3 never posts. A folder an earlier hang left where no tries
    are recorded (AzureML's ranks start without a launcher) stays: this one is the next try's."""
    store = TCPStore("127.0.0.1", free_port(), 1, True, wait_for_workers=False)
    here = os.uname().nodename
    ranks = [
        {"host": here, "pid": os.getpid()},
        {"host": here, "pid": stopped.pid},
        {"host": "elsewhere", "pid": 7},
        {"host": "elsewhere", "pid": 8},
    ]
    earlier = folder(tmp_path)
    assert earlier == tmp_path / "hang" / "try-1"
    earlier.mkdir(parents=True)
    (earlier / "flight-recorder-rank9").write_text("an older hang's")
    store.set("snakeddp/evidence/device/1", "cpu")
    verdict = Verdict(judge=0, culprit=1, silent=True)
    remote = Gathering(lambda op: op(), store, 2, ranks, "base", tmp_path)
    remote.give(Verdict.read(verdict.text().encode()))
    judge = Gathering(lambda op: op(), store, 0, ranks, "base", tmp_path)
    assert judge.reader(verdict) == 0 and remote.reader(verdict) == 0
    judge.give(verdict)
    started = time.monotonic()
    stacks = judge.write(verdict)
    assert time.monotonic() - started < 15, "rank 3 is waited for at most GATHER_S"
    assert stacks == tmp_path / "hang" / "try-2" / HANG_STACKS and sorted(p.name for p in stacks.parent.iterdir()) == [
        GPU,
        HANG_STACKS,
    ]
    assert (earlier / "flight-recorder-rank9").read_text() == "an older hang's"
    text = stacks.read_text()
    sections = text.split("\n== ")[1:]
    assert [s.split(" on ")[0] for s in sections] == ["rank 0", "rank 1", "rank 2", "rank 3"], text
    assert "test_the_judge_writes_every_ranks_stack" in sections[0] and "by its own watch" in sections[0]
    assert "the one the others waited for: taken by signal (stopped" in sections[1]
    assert "waits_in_a_collective_that_never_ends" in sections[1]
    assert sections[2].startswith("rank 2 on elsewhere (pid 7): by its own watch")
    assert "rank 3 on elsewhere (pid 8): not taken: it did not post its stack within" in sections[3]
    assert json.loads((stacks.parent / GPU).read_text()) == gpu_state("cpu", 1)
    assert not list((tmp_path / "hang").glob(".*")), "no partial folder left"
    judge.done()
    remote.wait_done()  # returns at once: the line was said


def test_a_silent_culprit_alone_on_its_host_is_said_not_taken(tmp_path):
    store = TCPStore("127.0.0.1", free_port(), 1, True, wait_for_workers=False)
    ranks = [{"host": "a", "pid": os.getpid()}, {"host": "b", "pid": 5}]
    verdict = Verdict(judge=0, culprit=1, silent=True)
    judge = Gathering(lambda op: op(), store, 0, ranks, "base", tmp_path)
    judge.give(verdict)
    text = judge.write(verdict).read_text()
    assert (
        "rank 1 on b (pid 5), the one the others waited for: not taken: its process stopped answering on host b" in text
    )
    gpu = json.loads((tmp_path / "hang" / "try-1" / GPU).read_text())
    assert gpu["state"] is None and "no rank of the run runs on rank 1's host" in gpu["why"]


def hang_of(stacks: Path) -> dict:
    """The try a launcher records for the hang whose line names ``stacks``."""
    culprit = {"rank": 1, "host": "h", "node": None, "pid": 9, "step": 5, "epoch": 0, "phase": "backward"}
    line = f"snakeddp.train: run base hung: ... Every rank's Python stack: {stacks}. HINT: rerun"
    record = {"kind": "stopped", "culprit": culprit, "stalled_s": 61.0, "limit_s": 60.0, "reached_step": 6}
    record["line"] = line
    return tries.entry(started=1.0, ended=70.0, outcome="hung", exit_code=1, launcher="srun", job_id=None,
                       resumed_from=None, saved_now=None, hang=record)  # fmt: skip


def a_hang(run_dir: Path, ranks: list[dict], silent: bool) -> Path:
    """One try's hang, judged by rank 0 over a store of its own, and recorded as its launcher records it."""
    store = TCPStore("127.0.0.1", free_port(), 1, True, wait_for_workers=False)
    store.set("snakeddp/evidence/device/1", "cpu")
    judge, verdict = Gathering(lambda op: op(), store, 0, ranks, "base", run_dir), Verdict(0, 1, silent)
    judge.give(verdict)
    stacks = judge.write(verdict)
    tries.append(run_dir, hang_of(stacks))
    return stacks


def test_each_hung_try_keeps_its_own_evidence_and_it_moves_with_its_attempt(stopped, tmp_path):
    """Two tries of one attempt hang (the second a retry, say on another node): each keeps its folder, named
    after its number in tries.json, with its own stacks. The attempt is set aside when the run's key changes:
    its evidence goes with it, the new attempt's first hang has a folder of its own, and both come back."""
    run_dir, here = tmp_path / "runs" / "base", os.uname().nodename
    first_key, second_key = "a" * 64, "b" * 64
    assert runstate.prepare(run_dir, first_key) is None
    first = a_hang(run_dir, [{"host": here, "pid": os.getpid()}, {"host": here, "pid": stopped.pid}], silent=True)
    second = a_hang(run_dir, [{"host": here, "pid": os.getpid()}, {"host": "b", "pid": 5}], silent=True)
    assert (first, second) == (RunPaths(run_dir).hang_of(1) / HANG_STACKS, RunPaths(run_dir).hang_of(2) / HANG_STACKS)
    recorded = tries.read(run_dir)
    assert [t["number"] for t in recorded] == [1, 2] and f"stack: {first}." in recorded[0]["hang"]["line"]
    assert f"stack: {second}." in recorded[1]["hang"]["line"]
    texts = {1: first.read_text(), 2: second.read_text()}
    assert "waits_in_a_collective_that_never_ends" in texts[1] and "taken by signal (stopped" in texts[1]
    assert "rank 1 on b (pid 5), the one the others waited for: not taken" in texts[2]

    assert runstate.prepare(run_dir, second_key) is None  # another config: the first attempt is kept
    kept = RunPaths(run_dir).attempt(runstate.attempt_id(first_key))
    assert not RunPaths(run_dir).hang_evidence.exists()
    assert {n: (kept.hang_of(n) / HANG_STACKS).read_text() for n in (1, 2)} == texts
    assert [t["number"] for t in tries.read(kept.folder)] == [1, 2]
    third = a_hang(run_dir, [{"host": here, "pid": os.getpid()}, {"host": "c", "pid": 6}], silent=True)
    assert third == RunPaths(run_dir).hang_of(1) / HANG_STACKS and "rank 1 on c (pid 6)" in third.read_text()

    assert runstate.prepare(run_dir, first_key) is None  # back to the first config: its attempt returns
    assert {n: (RunPaths(run_dir).hang_of(n) / HANG_STACKS).read_text() for n in (1, 2)} == texts
    later = RunPaths(run_dir).attempt(runstate.attempt_id(second_key))
    assert "rank 1 on c (pid 6)" in (later.hang_of(1) / HANG_STACKS).read_text()


def test_a_verdict_that_is_not_one_is_none():
    assert Verdict.read(b"0") is None and Verdict.read(b"{") is None
    assert Verdict.read(Verdict(1, 0, False).text().encode()) == Verdict(1, 0, False)


def test_the_culprits_gpu_state_is_what_nvml_answers_on_a_stand_in_gpu_host(tmp_path):
    """The stand-in driver's NVML (tests/gpu_standin): a GPU busy at 97 % with the rank's process on it holding
    12 GiB; what this NVML does not answer (temperature, power) is null, not guessed."""
    machine = StandIn(tmp_path / "machine", count=2, processes={1: [(4242, 12.0)]}, utilisation={1: 97})
    uuid = machine.uuids[1]
    asked = f"import json; from snakeddp.training.evidence import gpu_state; print(json.dumps(gpu_state({uuid!r}, 1)))"
    done = subprocess.run([sys.executable, "-c", asked], env=machine.env(dict(os.environ)), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(done.stdout)
    assert record["why"] is None and record["device"] == uuid, record
    state = record["state"]
    assert (state["uuid"], state["name"], state["utilization_gpu_percent"]) == (uuid, "NVIDIA A100-SXM4-40GB", 97)
    assert state["memory_total_mib"] == 40 * 1024 and state["memory_used_mib"] == 12 * 1024
    assert state["processes"] == [{"pid": 4242, "used_mib": 12 * 1024}]
    assert state["temperature_c"] is None and state["power_w"] is None
