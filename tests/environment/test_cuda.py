"""snakeddp.environment.cuda: a GPU rank's checks of torch's CUDA build against its GPU and driver, before
its first CUDA call, against stand-in GPUs (tests/gpu_standin.py) in processes of their own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from snakeddp.environment import cuda
from tests.gpu_standin import StandIn
from tests.helpers import subprocess_env

CHECK = "from snakeddp.environment import cuda; print(cuda.check_device(0))"


def test_kernels_run_on_their_capability_up_to_the_next_major_as_torch_judges():
    assert cuda.runs_on(80, 86) and cuda.runs_on(75, 75) and cuda.runs_on(120, 121)
    assert not cuda.runs_on(80, 75) and not cuda.runs_on(86, 80) and not cuda.runs_on(80, 90)
    assert cuda.arch_capabilities(["sm_75", "sm_90", "compute_120"]) == [75, 90, 120]
    assert cuda.builds_for(70) == ["12.6"] and cuda.builds_for(60) == ["12.6"]
    assert cuda.builds_for(90) == ["13.0", "13.2", "12.6"] and cuda.builds_for(37) == []
    assert cuda.builds_under("535.183.01") == ["12.6"] and cuda.builds_under("580.65.06") == ["13.0", "13.2", "12.6"]
    assert cuda.builds_under("470.1") == []


def checked(standin: StandIn, visible: str | None = None) -> subprocess.CompletedProcess:
    env = standin.env(subprocess_env(), visible=visible)
    argv = standin.command([sys.executable, "-c", CHECK])
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def one_line(done: subprocess.CompletedProcess) -> str:
    """The LaunchError's message: the last line of the traceback a bare check prints."""
    assert done.returncode != 0, done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("snakeddp.errors.LaunchError: ") and "HINT:" in last, done.stderr[-2000:]
    return last.removeprefix("snakeddp.errors.LaunchError: ")


def test_a_gpu_the_build_has_kernels_for_passes_and_is_named(tmp_path: Path):
    done = checked(StandIn(tmp_path, capability="8.0"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "NVIDIA A100-SXM4-40GB, compute capability 8.0, CUDA 13.0 build"


def test_a_v100_under_the_cuda_13_build_stops_naming_both_and_the_build_that_serves_it(tmp_path: Path):
    v100 = StandIn(tmp_path / "13", capability="7.0", model="Tesla V100-SXM2-16GB")
    line = one_line(checked(v100))
    assert line.startswith("Tesla V100-SXM2-16GB on ") and "has compute capability 7.0" in line
    assert "CUDA 13.0 build has kernels for 7.5, 8.0, 8.6, 9.0, 10.0, 12.0 only" in line
    assert 'HINT: install the CUDA 12.6 build: environment.cuda: "12.6"' in line
    assert "`tools/setup.sh --cuda 12.6`" in line
    # What the HINT installs: the 12.6 build, which has sm_70 kernels.
    served = StandIn(
        tmp_path / "12.6", capability="7.0", model="Tesla V100-SXM2-16GB", build="12.6", driver="535.183.01"
    )
    assert checked(served).returncode == 0


def test_a_driver_older_than_the_build_needs_stops_naming_it_and_the_build_it_runs(tmp_path: Path):
    line = one_line(checked(StandIn(tmp_path, driver="535.183.01")))
    assert "torch sees no CUDA device on " in line and "NVIDIA driver: 535.183.01" in line
    assert "the driver is older than the CUDA 13.0 build needs (580 or newer)" in line
    assert "HINT: install the CUDA 12.6 build" in line and "or update the driver" in line


def test_gpus_hidden_by_cuda_visible_devices_stop_the_rank_instead_of_a_cpu_run(tmp_path: Path):
    line = one_line(checked(StandIn(tmp_path), visible=""))
    assert "this node shows no GPU visible (1 installed, CUDA_VISIBLE_DEVICES='' hides them)" in line
    assert "CUDA_VISIBLE_DEVICES hides the GPUs, and a GPU run never trains on the CPU instead" in line
    assert "HINT: leave CUDA_VISIBLE_DEVICES unset" in line


def test_a_cpu_build_of_torch_is_named_as_such():
    done = subprocess.run([sys.executable, "-c", CHECK], env=subprocess_env(), capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    line = one_line(done)
    assert "(NVIDIA driver: none loaded; torch " in line and "a CPU build" in line
    assert "torch is a CPU build" in line and "HINT: install the CUDA 13.0 build" in line


@pytest.mark.parametrize("capability, supported", [("7.5", True), ("9.0", True), ("6.0", False), ("12.1", True)])
def test_the_builds_table_agrees_with_the_stand_ins_arch_lists(tmp_path: Path, capability, supported):
    done = checked(StandIn(tmp_path, capability=capability))
    assert (done.returncode == 0) == supported, done.stderr[-1500:]
