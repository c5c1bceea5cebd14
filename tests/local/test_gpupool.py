"""snakeddp.local.gpupool: the GPUs a train job takes, in a job's process on a stand-in machine (its NVML,
tests/gpu_standin/nvml.c; its own folder of GPU locks): busy GPUs skipped and said so, too few refused in one
line, GPUs other runs hold waited for, never shared, whichever workflow (checkout) the runs are of."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from snakeddp.local import gpupool
from snakeddp.local.platform import CONTRACT
from tests.gpu_standin import StandIn
from tests.helpers import subprocess_env

# A train job's take: the GPUs it was given on stdout, then it holds them until its stdin closes.
TAKE = """
import os, sys
from snakeddp.errors import exit_code
from snakeddp.local import gpupool
def take():
    print(gpupool.take(int(sys.argv[1]), os.environ).get("CUDA_VISIBLE_DEVICES"), flush=True)
    sys.stdin.read()
    return 0
sys.exit(exit_code("snakeddp.launch", take))
"""


def pool(folder: Path, size: int) -> Path:
    gpupool.prepare(size, folder)
    return folder


def job(standin: StandIn, slots: Path, devices: int = 1) -> subprocess.Popen:
    env = {**standin.env(subprocess_env(), visible=None), gpupool.POOL: str(slots)}
    argv = [sys.executable, "-c", TAKE, str(devices)]
    return subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def given(process: subprocess.Popen) -> str:
    return process.stdout.readline().strip()


def end(process: subprocess.Popen) -> tuple[str, str]:
    out, err = process.communicate("", timeout=60)
    return out, err


def test_a_busy_gpu_is_skipped_and_said_so_in_one_line(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=2, memory_gb=80, processes={0: [(4242, 78)]})
    taking = job(standin, pool(tmp_path / "flow", 2))
    assert given(taking) == standin.uuids[1]
    _, said = end(taking)
    assert said.splitlines() == [
        f"snakeddp: GPU 0 (NVIDIA A100-SXM4-40GB, {standin.uuids[0]}) busy: pid 4242 holds 78 of 80 GiB; the run "
        f"takes GPU 1 (NVIDIA A100-SXM4-40GB, {standin.uuids[1]})."
    ]


def test_too_few_free_gpus_are_refused_in_one_line_naming_the_busy_ones_and_a_freed_one_is_taken(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=2, processes={0: [(4242, 30)]}, compute_mode={1: "EXCLUSIVE_PROCESS"})
    standin.processes[1] = [(5151, 2)]
    standin.write_use()
    taking = job(standin, pool(tmp_path / "flow", 2))
    out, err = end(taking)
    assert taking.returncode == 1 and out == ""
    assert err.splitlines() == [
        "snakeddp.launch: the run's 1 rank needs 1 GPU of its own, and of the 2 this machine shows 2 are busy with "
        f"other work: GPU 0 (NVIDIA A100-SXM4-40GB, {standin.uuids[0]}) busy: pid 4242 holds 30 of 40 GiB; GPU 1 "
        f"(NVIDIA A100-SXM4-40GB, {standin.uuids[1]}) busy: EXCLUSIVE_PROCESS mode, and pid 5151 holds it (2 of 40 "
        "GiB). HINT: run it again when they are free (nvidia-smi lists the processes on them)."
    ]
    # What the HINT says: the exclusive GPU's process ended, and the run takes it.
    standin.processes = {0: [(4242, 30)]}
    standin.write_use()
    again = job(standin, pool(tmp_path / "flow", 2))
    assert given(again) == standin.uuids[1]
    end(again)


def test_a_two_rank_run_beside_a_busy_gpu_is_told_how_many_fit(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=2, processes={1: [(4242, 30)]})
    out, err = end(job(standin, pool(tmp_path / "flow", 2), devices=2))
    assert out == "" and "the run's 2 ranks need 2 GPUs of their own, and of the 2 this machine shows 1 is busy" in err
    assert err.rstrip().endswith("HINT: run it again when the GPU is free (nvidia-smi lists the processes on it), or "
                                 "set launch.devices: 1 or fewer.")  # fmt: skip
    fits = job(standin, pool(tmp_path / "flow", 2), devices=1)  # what the HINT says
    assert given(fits) == standin.uuids[0]
    end(fits)


def test_runs_of_two_checkouts_take_different_gpus_and_a_third_waits_for_one_saying_so_once(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=2)
    first, second = job(standin, pool(tmp_path / "one", 2)), job(standin, pool(tmp_path / "two", 2))
    first_gpu, second_gpu = given(first), given(second)
    assert sorted([first_gpu, second_gpu]) == standin.uuids
    third = job(standin, pool(tmp_path / "three", 2))
    time.sleep(3 * gpupool.POLL_S)  # long enough to have tried three times
    assert third.poll() is None, "it waits"
    end(first)
    assert given(third) == first_gpu
    _, waited = end(third)
    end(second)
    assert len(waited.splitlines()) == 1 and waited.startswith("snakeddp: waiting for 1 GPU of this machine: GPU 0"), (
        waited
    )
    held = [f"held by another snakeddp run (pid {job.pid})" for job in (first, second)]
    assert f"{held[0 if first_gpu == standin.uuids[0] else 1]}; GPU 1" in waited, waited
    assert waited.rstrip().endswith(f"{held[1 if first_gpu == standin.uuids[0] else 0]}."), waited


def test_runs_the_user_asked_to_share_share_and_never_with_a_run_of_its_own(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=1)
    sharing = pool(tmp_path / "sharing", 2)  # --resources gpu=2 on one GPU
    first, second = job(standin, sharing), job(standin, sharing)
    assert given(first) == given(second) == standin.uuids[0]
    alone = job(standin, pool(tmp_path / "alone", 1))
    time.sleep(2 * gpupool.POLL_S)
    assert alone.poll() is None, "a run of its own waits for the sharers"
    end(first)
    end(second)
    assert given(alone) == standin.uuids[0]
    end(alone)


def test_more_ranks_than_gpus_are_refused_in_one_line(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=1)
    out, err = end(job(standin, pool(tmp_path / "flow", 1), devices=2))
    assert out == "" and err.splitlines() == [
        "snakeddp.launch: the run's 2 ranks need 2 GPUs of their own, and this machine shows 1 GPU. HINT: set "
        "launch.devices: 1 or fewer."
    ]
    fits = job(standin, pool(tmp_path / "flow", 1), devices=1)  # what the HINT says
    assert given(fits) == standin.uuids[0]
    end(fits)


# A train job's take as the launcher makes it, then what the local platform tells of the wait (a try's account).
TAKE_AND_TELL = """
import json, os, sys
from snakeddp.local import gpupool
from snakeddp.local.platform import CONTRACT
print("asking", flush=True)
taken = gpupool.take(1, os.environ)
print(json.dumps(CONTRACT.where_tried({**os.environ, **taken})), flush=True)
sys.stdin.read()
"""


def test_the_wait_for_a_gpu_is_the_local_platforms_queue_wait(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=1)

    def telling(folder: Path) -> subprocess.Popen:
        env = {**standin.env(subprocess_env(), visible=None), gpupool.POOL: str(pool(folder, 1))}
        return subprocess.Popen([sys.executable, "-c", TAKE_AND_TELL], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip

    first = telling(tmp_path / "one")
    assert given(first) == "asking"
    assert json.loads(given(first))["queue_wait_s"] < gpupool.POLL_S  # the GPU was free
    second = telling(tmp_path / "two")
    assert given(second) == "asking"  # its clock starts now: the wait is timed from the request, not the Popen
    time.sleep(2.5 * gpupool.POLL_S)
    end(first)
    waited = json.loads(given(second))["queue_wait_s"]
    end(second)
    assert 2 * gpupool.POLL_S <= waited < 10, waited  # slept 2.5 polls after its request
    assert CONTRACT.where_tried({}) == {}, "a CPU run (no pool): not known"
