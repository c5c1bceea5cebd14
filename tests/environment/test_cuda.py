"""snakeddp.environment.cuda: a GPU rank's checks of torch's CUDA build against its GPU and driver, before
its first CUDA call, against stand-in GPUs (tests/gpu_standin.py) in processes of their own (forked from one
interpreter per torch build that imported torch once: tests.gpu_standin.Checks), each with
PYTORCH_NVML_BASED_CUDA_CHECK=1 as importing Lightning sets it (torch then counts GPUs through NVML)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from snakeddp.environment import cuda
from snakeddp.util import cudabuild, gpus
from tests.gpu_standin import Checks, StandIn
from tests.helpers import subprocess_env

CHECK = "import sys; from snakeddp.environment import cuda; print(cuda.check_device(0, ranks_on_node=int(sys.argv[1])))"
# What torch itself answers on the same machine: its availability, and its first CUDA call's error.
TORCH = """
import torch
print(torch.cuda.is_available(), torch.cuda.device_count())
try:
    torch.cuda.get_device_name(0)
except RuntimeError as error:
    print(error)
"""


def test_kernels_run_on_their_capability_up_to_the_next_major_as_torch_judges():
    assert cuda.runs_on(80, 86) and cuda.runs_on(75, 75) and cuda.runs_on(120, 121)
    assert not cuda.runs_on(80, 75) and not cuda.runs_on(86, 80) and not cuda.runs_on(80, 90)
    assert cuda.arch_capabilities(["sm_75", "sm_90", "compute_120"]) == [75, 90, 120]
    assert cuda.builds_for(70) == ["12.6"] and cuda.builds_for(60) == ["12.6"]
    assert cuda.builds_for(90) == ["13.0", "13.2", "12.6"] and cuda.builds_for(37) == []
    assert cuda.builds_under("535.183.01") == ["12.6"] and cuda.builds_under("580.65.06") == ["13.0", "13.2", "12.6"]
    assert cuda.builds_under("470.1") == []
    assert cudabuild.model_capability("v100") == 70 and cudabuild.model_capability("nvidia_a100-sxm4-80gb") == 80
    assert cudabuild.model_capability("NVIDIA H100 80GB HBM3") == 90 and cudabuild.model_capability("1g.10gb") is None


@pytest.fixture
def checks(standin_checks: Checks) -> Checks:
    return standin_checks


def run(checks: Checks, standin: StandIn, code: str, *args: str, visible: str | None = None):
    env = {**standin.env(subprocess_env(), visible=visible), "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    return checks.run(standin, env, code, *args)


def checked(checks: Checks, standin: StandIn, visible: str | None = None, ranks: int = 1):
    return run(checks, standin, CHECK, str(ranks), visible=visible)


def one_line(done: subprocess.CompletedProcess, refused: bool = True) -> str:
    """The LaunchError's message: the last line of the traceback a bare check prints. ``refused``: a
    MachineRefusal (what any node like this one refuses again: not retried), else a plain LaunchError."""
    assert done.returncode != 0, done.stdout
    last = done.stderr.strip().splitlines()[-1]
    kind = "snakeddp.errors.MachineRefusal: " if refused else "snakeddp.errors.LaunchError: "
    assert last.startswith(kind) and "HINT:" in last, done.stderr[-2000:]
    return last.removeprefix(kind)


def test_a_gpu_the_build_has_kernels_for_passes_and_is_named_without_initialising_cuda(checks, tmp_path: Path):
    done = checked(checks, StandIn(tmp_path, capability="8.0"))
    # The stand-in's CUDA initialisation always fails: the check passing proves it never called it.
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "NVIDIA A100-SXM4-40GB, compute capability 8.0, CUDA 13.0 build"


def test_a_v100_under_the_cuda_13_build_stops_naming_both_and_the_build_that_serves_it(checks, tmp_path: Path):
    v100 = StandIn(tmp_path / "13", capability="7.0", model="Tesla V100-SXM2-16GB")
    line = one_line(checked(checks, v100))
    assert line.startswith("Tesla V100-SXM2-16GB on ") and "has compute capability 7.0" in line
    assert "CUDA 13.0 build has kernels for 7.5, 8.0, 8.6, 9.0, 10.0, 12.0 only" in line
    # The 12.6 build serves it, and this checkout has not locked it (no hashes: every installer refuses it).
    assert "HINT: set launch.accelerator: cpu (the CUDA 12.6 build would serve it, and this checkout has not" in line
    assert "a maintainer locks it by running tools/lock.sh where https://download.pytorch.org/whl/cu126" in line
    assert "install the CUDA 12.6 build" not in line and "tools/setup.sh" not in line
    # What the 12.6 build does once a maintainer has locked it: it has sm_70 kernels.
    served = StandIn(
        tmp_path / "12.6", capability="7.0", model="Tesla V100-SXM2-16GB", build="12.6", driver="535.183.01"
    )
    assert checked(checks, served).returncode == 0


def test_a_driver_older_than_the_build_stops_naming_it_where_torch_would_see_the_gpu_and_raise(checks, tmp_path: Path):
    old = StandIn(tmp_path / "570", driver="570.86.15")
    # As torch 2.13 behaves under Lightning: NVML counts the GPU, and CUDA's first call raises.
    available, error = run(checks, old, TORCH).stdout.strip().splitlines()
    assert available == "True 1", available
    assert error.startswith("The NVIDIA driver on your system is too old (found version 12080)"), error
    line = one_line(checked(checks, old))
    assert line.startswith("the NVIDIA driver on ") and " is 570.86.15, older than torch 2.13.0's CUDA 13.0" in line
    assert "needs (580 or newer)" in line and "HINT: update the driver to 580 or newer, or declare NVIDIA's" in line
    assert "install the CUDA 12.6 build" not in line, "the 12.6 build is not locked in this checkout"
    # What the 12.6 build does once a maintainer has locked it: this driver runs it.
    served = StandIn(tmp_path / "12.6", driver="570.86.15", build="12.6")
    assert checked(checks, served).stdout.strip() == "NVIDIA A100-SXM4-40GB, compute capability 8.0, CUDA 12.6 build"


def test_gpus_hidden_by_cuda_visible_devices_stop_the_rank_instead_of_a_cpu_run(checks, tmp_path: Path):
    line = one_line(checked(checks, StandIn(tmp_path), visible=""), refused=False)
    assert "this node shows no GPU visible (1 installed, CUDA_VISIBLE_DEVICES='' hides them)" in line
    assert "CUDA_VISIBLE_DEVICES hides the GPUs, and a GPU run never trains on the CPU instead" in line
    assert "HINT: leave CUDA_VISIBLE_DEVICES unset" in line


def test_a_container_without_the_gpus_on_a_gpu_host_says_it_reaches_none(checks, tmp_path: Path):
    container = StandIn(tmp_path, count=2, reachable=False)
    assert run(checks, container, TORCH).stdout.splitlines()[0] == "False 0", "torch sees none either"
    line = one_line(checked(checks, container), refused=False)
    assert "this node shows no GPU this process can reach (the host's driver lists 2" in line, line
    assert "no GPU is allocated to this process" in line and "HINT: run on nodes with GPUs allocated" in line


def test_wsl2_without_the_drivers_proc_files_reaches_its_gpu_through_nvml(checks, tmp_path: Path):
    done = checked(checks, StandIn(tmp_path, proc=False, model="NVIDIA GeForce RTX 4090", capability="8.9"))
    assert done.stdout.strip() == "NVIDIA GeForce RTX 4090, compute capability 8.9, CUDA 13.0 build", done.stderr


def test_mig_slices_serve_one_rank_each_process_and_two_ranks_stop_before_lightnings_device_check(
    checks, tmp_path: Path
):
    mig = StandIn(tmp_path, mig=2)
    slices = ",".join(mig.mig_uuids)
    assert run(checks, mig, TORCH, visible=slices).stdout.splitlines()[0] == "True 1", "torch: one MIG device a process"
    one = checked(checks, mig, visible=slices)
    assert one.stdout.strip() == "NVIDIA A100-SXM4-40GB MIG 1g.5gb, compute capability 8.0, CUDA 13.0 build"
    line = one_line(checked(checks, mig, visible=slices, ranks=2))
    assert "2 ranks on " in line and "enumerates 1 CUDA device (MIG slices: a CUDA process enumerates one)" in line
    assert "HINT: set launch.devices: 1" in line


def test_several_models_on_one_host_each_rank_checks_its_own(checks, tmp_path: Path):
    host = StandIn(tmp_path, models=[("NVIDIA A100-SXM4-40GB", "8.0"), ("Tesla V100-SXM2-16GB", "7.0")])
    assert checked(checks, host, visible="0").returncode == 0
    assert one_line(checked(checks, host, visible="1")).startswith("Tesla V100-SXM2-16GB on ")
    assert one_line(checked(checks, host, visible=host.uuids[1])).startswith("Tesla V100-SXM2-16GB on ")


def test_a_cpu_build_of_torch_is_named_as_such(checks, tmp_path: Path):
    line = one_line(checked(checks, StandIn(tmp_path, build="cpu")))
    assert "(NVIDIA driver: 580.95.05; torch 2.13.0+cpu, a CPU build" in line
    assert "torch is a CPU build" in line and "HINT: install the CUDA 13.0 build" in line


def test_a_cpu_build_on_a_node_without_nvidia_gpus_is_told_to_train_on_the_cpu_first():
    """A CUDA build would find nothing to drive there either (`tools/setup.sh --cuda` changed nothing a user saw)."""
    reason, hint = cuda.why_no_device(None, {}, gpus.Driver(version=None))
    assert reason == "torch is a CPU build, and this node has no NVIDIA GPU"
    assert hint.startswith("set launch.accelerator: cpu to train here; for GPUs, run on GPU nodes and install the CUDA")
    # A node whose driver lists GPUs keeps the build's remedy first.
    assert cuda.why_no_device(None, {}, gpus.Driver(version="580.95.05", listed=1))[0] == "torch is a CPU build"


@pytest.mark.parametrize("build", ["13.0", "12.6"])
def test_the_builds_table_is_what_the_stand_ins_torch_reports(checks, tmp_path: Path, build):
    """The table against the arch list of each build the stand-in models (tests/gpu/ checks the real one's)."""
    driver = "580.95.05" if build.startswith("13") else "535.183.01"
    standin = StandIn(tmp_path, build=build, driver=driver)
    arch = run(checks, standin, "import torch; print(*torch.cuda.get_arch_list())")
    assert tuple(cuda.arch_capabilities(arch.stdout.split())) == cuda.BUILD_CAPABILITIES[build], arch.stderr[-1500:]


def test_a_driver_library_version_mismatch_stops_the_rank_in_nvmls_words_and_a_reboot_serves_it(checks, tmp_path):
    """After a driver upgrade without a reboot, NVML answers "Driver/library version mismatch" (and CUDA fails
    alike), while /proc and /dev show the GPU: the rank stops quoting NVML, never in CUDA's traceback."""
    line = one_line(checked(checks, StandIn(tmp_path / "upgraded", nvml_init=18)), refused=False)
    assert 'this node shows no GPU this process can use (NVML answers "Driver/library version mismatch"' in line
    assert "HINT: reboot the machine (or reload the NVIDIA kernel modules)" in line, line
    # What the HINT does: the rebooted machine's NVML answers, and the rank is served.
    assert checked(checks, StandIn(tmp_path / "rebooted")).returncode == 0


def test_in_a_one_gpu_slurm_step_of_a_four_gpu_node_the_rank_checks_the_allocated_gpu(checks, tmp_path: Path):
    """Slurm's CUDA_VISIBLE_DEVICES=0 in a step given GPU 2 (a V100 among A100s): the rank checks GPU 2."""
    a100, v100 = ("NVIDIA A100-SXM4-40GB", "8.0"), ("Tesla V100-SXM2-16GB", "7.0")
    step = StandIn(tmp_path, models=[a100, a100, v100, a100], denied=(0, 1, 3))
    assert run(checks, step, TORCH, visible="0").stdout.splitlines()[0] == "True 1", "torch: the step's one GPU"
    assert one_line(checked(checks, step, visible="0")).startswith("Tesla V100-SXM2-16GB on ")
