"""snakeddp.util.gpuuse: other work on this machine's GPUs as NVML answers it, through the stand-in driver's
NVML (tests/gpu_standin/nvml.c) in a process of its own, as a train job asks it; and the line that says why a
GPU is busy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from snakeddp.util import gpuuse
from tests.gpu_standin import StandIn
from tests.helpers import subprocess_env

GIB = 1 << 30
# Each GPU the process sees, its NVML answer and why it is busy, one line each.
ASK = """
import os
from snakeddp.util import gpus, gpuuse
with gpuuse.asking() as use_of:
    for gpu in gpus.visible(os.environ):
        use = use_of(gpu.uuid)
        print(gpu.bus, len(use.processes), use.used, use.total, use.mode, use.busy(), sep="|")
"""


def asked(standin: StandIn) -> list[list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", ASK], env=standin.env(subprocess_env(), visible=None), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return [line.split("|") for line in done.stdout.splitlines()]


def test_another_process_on_a_gpu_is_named_with_the_memory_it_holds(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=2, memory_gb=80, processes={0: [(4242, 78)]})
    (busy, free) = asked(standin)
    assert busy == ["0", "1", str(78 * GIB), str(80 * GIB), "0", "pid 4242 holds 78 of 80 GiB"]
    assert free == ["1", "0", "0", str(80 * GIB), "0", "None"]


def test_a_freed_gpu_is_free_at_the_next_question(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=1, processes={0: [(4242, 30), (4343, 5)]})
    assert asked(standin)[0][-1] == "pids 4242, 4343 hold 35 of 40 GiB"
    standin.processes = {}
    standin.write_use()
    assert asked(standin)[0][-1] == "None"


def test_compute_modes_and_memory_held_out_of_sight(tmp_path: Path):
    standin = StandIn(
        tmp_path / "m",
        count=3,
        processes={0: [(4242, 1)]},
        compute_mode={0: "EXCLUSIVE_PROCESS", 1: "PROHIBITED", 2: "EXCLUSIVE_PROCESS"},
        hidden_use={2: 20},
    )
    exclusive, prohibited, other_container = (line[-1] for line in asked(standin))
    assert exclusive == "EXCLUSIVE_PROCESS mode, and pid 4242 holds it (1 of 40 GiB)"
    assert prohibited == "its compute mode is PROHIBITED: no process may use it"
    assert other_container == "20 of 40 GiB in use by processes this one cannot see (another container's)"


def test_an_idle_gpu_is_free_whatever_the_driver_reserves_and_its_own_process_is_not_another():
    assert gpuuse.Use((), used=600 << 20, total=80 * GIB).busy() is None
    assert gpuuse.Use((), used=3 * GIB, total=80 * GIB).busy() is None  # a desktop's share: under a twentieth
    assert gpuuse.Use((), used=5 * GIB, total=80 * GIB).busy() is not None
    assert gpuuse.Use((), used=0, total=80 * GIB, mode=gpuuse.EXCLUSIVE_PROCESS).busy() is None
    assert gpuuse.gib(3 * GIB // 2) == "1.5" and gpuuse.gib(78 * GIB + 1) == "78" and gpuuse.gib(GIB) == "1"


def test_without_nvml_every_gpu_is_free(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=1, processes={0: [(4242, 30)]})
    env = {**standin.env(subprocess_env(), visible=None), "SNAKEDDP_STANDIN_NVML": str(tmp_path / "none")}
    code = "from snakeddp.util import gpuuse\nwith gpuuse.asking() as use_of: print(use_of('GPU-0') == gpuuse.FREE)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout == "True\n", done.stderr


# Holds a tenth of GPU 0's memory (2 GiB at least) until its stdin closes.
HOLD_MEMORY = """
import sys, torch
total = torch.cuda.get_device_properties(0).total_memory
held = torch.empty(max(2 << 30, total // 10), dtype=torch.uint8, device="cuda:0")
print(held.numel(), flush=True)
sys.stdin.read()
"""


def nvidia_smi_pids(uuid: str) -> list[int]:
    rows = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return sorted(int(pid) for row in rows.splitlines() for gpu, pid in [row.split(", ")] if gpu == uuid)


@pytest.mark.gpu
def test_a_process_holding_gpu_memory_makes_the_gpu_busy_for_another_as_nvidia_smi_lists_it():
    """On a real GPU: another process's CUDA memory, as the driver's NVML and nvidia-smi report it (in a container
    NVML may name the process by a pid of the host's, which this test does not compare with the child's)."""
    from snakeddp.util import gpus

    shown = gpus.visible(os.environ)
    assert shown, "pytest -m gpu needs CUDA GPUs; run it on a GPU machine (docs/development.md)"
    uuid = shown[0].uuid
    env = subprocess_env(CUDA_VISIBLE_DEVICES=uuid)
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_MEMORY], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        size = int(child.stdout.readline())
        with gpuuse.asking() as use_of:
            held = use_of(uuid)
        assert held.busy() is not None and held.used >= size, held
        assert sorted(pid for pid, _ in held.processes) == [pid for pid in nvidia_smi_pids(uuid) if pid != os.getpid()]
    finally:
        child.communicate("")
    with gpuuse.asking() as use_of:
        after = use_of(uuid)
    assert after.used <= held.used - size and (len(after.processes) < len(held.processes) or not held.processes)
