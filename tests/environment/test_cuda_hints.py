"""What a GPU rank's refusal tells the user to do, done: under a 570 driver (stand-in GPUs, tests/gpu_standin.py)
every HINT names only what this checkout can carry out (the 12.6 build, which that driver runs, is not locked
here: envs/requirements-torch-12.6.lock has no hashes), and the declaration it offers, NVIDIA's forward
compatibility, lets the same rank pass; torch's ROCm build is checked against the AMD GPUs it enumerates."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from snakeddp.environment import cuda
from snakeddp.environment.builds import BUILDS
from snakeddp.environment.files import ENVS, build_lock, locked_build
from snakeddp.errors import EnvFileError
from snakeddp.util import amdgpus
from snakeddp.workflow import jobenv
from tests.gpu_standin import Checks, StandIn
from tests.helpers import subprocess_env

CHECK = "from snakeddp.environment import cuda; print(cuda.check_device(0))"


def standin_env(standin: StandIn) -> dict[str, str]:
    return {**standin.env(subprocess_env()), "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


def checked(checks: Checks, standin: StandIn, **extra: str) -> subprocess.CompletedProcess:
    return checks.run(standin, {**standin_env(standin), **extra}, CHECK)


def refusal(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0, done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("snakeddp.errors.MachineRefusal: ") and last.count("HINT:") == 1, done.stderr[-2000:]
    return last.removeprefix("snakeddp.errors.MachineRefusal: ")


def test_the_hints_offer_a_build_only_where_this_checkouts_lock_of_it_has_hashes():
    locked = {cuda: build_lock(build, ENVS) is not None for cuda, build in BUILDS.items()}
    assert locked["13.0"], "PyPI's build is locked here"
    for cuda_build, hashed in locked.items():
        hint = cuda.install_hint([cuda_build])
        if hashed:
            assert hint.startswith(f"install the CUDA {cuda_build} build") and f"--cuda {cuda_build}`" in hint
        else:  # what every installer would refuse is never offered as a command
            assert "install the CUDA" not in hint and "tools/setup.sh" not in hint, hint
            assert hint.startswith("set launch.accelerator: cpu (") and "tools/lock.sh where https://" in hint
    # An installer's refusal of an unlocked build offers the builds that are locked, and only those.
    for cuda_build in (name for name, hashed in locked.items() if not hashed):
        with pytest.raises(EnvFileError) as refused:
            locked_build(cuda_build, ENVS)
        offered = re.findall(r'"([\d.a-z]+)"', str(refused.value).split("HINT:")[1])
        assert offered and all(locked[name] for name in offered), str(refused.value)
    # The first locked build of several is the one offered.
    first = next(cuda_build for cuda_build in ("12.6", "13.0") if locked[cuda_build])
    assert cuda.install_hint(["12.6", "13.0"]).startswith(f"install the CUDA {first} build")


def test_under_a_570_driver_every_hint_names_what_this_checkout_does_and_forward_compat_passes(checks, tmp_path):
    a100 = StandIn(tmp_path / "a100", driver="570.86.15")
    line = refusal(checked(checks, a100))
    hint = line.split("HINT: ", 1)[1]
    assert "install the CUDA" not in hint and "tools/setup.sh" not in hint, hint
    assert hint.startswith("update the driver to 580 or newer, or declare NVIDIA's forward compatibility")
    assert '(--config "environment={cuda_forward_compat: true}")' in hint
    assert "set launch.accelerator: cpu (the CUDA 12.6 build would serve it" in hint and "tools/lock.sh" in hint
    # The declaration, as the workflow exports it for that --config: the same rank passes its checks.
    declared = jobenv.forward_compat({"environment": {"cuda_forward_compat": True}})
    done = checked(checks, a100, **declared)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "NVIDIA A100-SXM4-40GB, compute capability 8.0, CUDA 13.0 build"
    # Turned off again (false is exported too, so nothing stays declared): refused as before.
    assert refusal(checked(checks, a100, **jobenv.forward_compat({"environment": {}}))) == line


# A CUDA driver library that answers cuDriverGetVersion as the one this process loads would: the 570 driver's own
# (12080) or cuda-compat-13-0's (13000), first on LD_LIBRARY_PATH as NVIDIA's guide puts cuda-compat's folder.
LIBCUDA = """
#include <stdlib.h>
int cuDriverGetVersion(int *version) { *version = atoi(getenv("STANDIN_CUDA_DRIVER")); return 0; }
"""


def libcuda(folder: Path) -> Path:
    folder.mkdir()
    (folder / "libcuda.c").write_text(LIBCUDA)
    built = ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(folder / "libcuda.so.1")]
    subprocess.run([*built, str(folder / "libcuda.c")], check=True, capture_output=True, timeout=120)
    return folder


def rank(standin: StandIn, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The check in a process of its own: the dynamic loader reads LD_LIBRARY_PATH when a process starts."""
    argv = standin.command([sys.executable, "-c", CHECK])
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_declared_forward_compat_is_checked_against_the_cuda_driver_library_the_rank_loads(tmp_path: Path):
    a100 = StandIn(tmp_path / "a100", driver="570.86.15")
    env = {**standin_env(a100), **jobenv.forward_compat({"environment": {"cuda_forward_compat": True}})}
    first = f"{libcuda(tmp_path / 'compat')}:{env['LD_LIBRARY_PATH']}"
    # cuda-compat not first on LD_LIBRARY_PATH: the library loaded is the 570 driver's own, and CUDA would refuse.
    line = refusal(rank(a100, {**env, "LD_LIBRARY_PATH": first, "STANDIN_CUDA_DRIVER": "12080"}))
    assert line.startswith("environment.cuda_forward_compat is declared, and the CUDA driver library this process")
    assert "(libcuda.so.1) is CUDA 12.8's, the NVIDIA driver 570.86.15's own" in line, line
    assert "HINT: put cuda-compat's folder first on the jobs' LD_LIBRARY_PATH" in line
    # Done: cuda-compat-13-0's library first, and the rank passes its checks.
    done = rank(a100, {**env, "LD_LIBRARY_PATH": first, "STANDIN_CUDA_DRIVER": "13000"})
    assert done.returncode == 0 and done.stdout.strip().endswith("CUDA 13.0 build"), done.stderr[-2000:]


def test_forward_compat_is_not_offered_nor_taken_for_geforce_gpus(checks, tmp_path: Path):
    geforce = StandIn(tmp_path / "rtx", driver="570.86.15", model="NVIDIA GeForce RTX 4090", capability="8.9")
    offered = refusal(checked(checks, geforce))
    assert "(NVIDIA's forward compatibility does not serve NVIDIA GeForce RTX 4090: data-centre GPUs only)" in offered
    assert "cuda_forward_compat: true" not in offered
    declared = refusal(checked(checks, geforce, **jobenv.forward_compat({"environment": {"cuda_forward_compat": 1}})))
    assert "does not serve NVIDIA GeForce RTX 4090" in declared


def kfd(root: Path, *targets: int) -> Path:
    """A KFD topology as the amdgpu driver lists it: node 0 the CPU (no SIMDs), then one node per GPU."""
    nodes = root / "nodes"
    (nodes / "0").mkdir(parents=True)
    (nodes / "0" / "properties").write_text("cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\n")
    for index, target in enumerate(targets, start=1):
        (nodes / str(index)).mkdir()
        (nodes / str(index) / "properties").write_text(
            f"cpu_cores_count 0\nsimd_count 1216\ngfx_target_version {target}\nunique_id {1000 + index}\n"
        )
    return nodes


def test_amd_gpus_are_read_from_the_kfd_topology_and_hidden_as_rocr_and_hip_hide_them(tmp_path: Path):
    nodes = kfd(tmp_path, 90402, 90402, 90010)
    every = amdgpus.installed(nodes)
    assert [gpu.gfx for gpu in every] == ["gfx942", "gfx942", "gfx90a"]
    assert every[0].model == "AMD Instinct MI300 series (gfx942)" and amdgpus.gfx_name(110000) == "gfx1100"
    assert amdgpus.visible({}, nodes) == every
    assert amdgpus.visible({"HIP_VISIBLE_DEVICES": "2"}, nodes) == [every[2]]
    assert amdgpus.visible({"CUDA_VISIBLE_DEVICES": "1,0"}, nodes) == [every[1], every[0]]
    # ROCr's list first, then HIP's indices into what it left; HIP's wins over CUDA_VISIBLE_DEVICES.
    both = {"ROCR_VISIBLE_DEVICES": "1,2", "HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"}
    assert amdgpus.visible(both, nodes) == [every[2]]
    assert amdgpus.visible({"ROCR_VISIBLE_DEVICES": f"GPU-{1002:x}"}, nodes) == [every[1]]
    assert amdgpus.describe({"HIP_VISIBLE_DEVICES": ""}, nodes).startswith("0 AMD GPUs of 3 installed")
    assert amdgpus.installed(tmp_path / "absent") == []


def test_a_rank_of_torchs_rocm_build_trains_on_its_amd_gpu_and_is_refused_in_one_line_without_one(tmp_path: Path):
    nodes = kfd(tmp_path, 90402)
    device = cuda.check_amd_device(0, "6.4.43484", "2.13.0+rocm6.4", {}, topology=nodes)
    assert str(device) == "AMD Instinct MI300 series (gfx942), ROCm 6.4.43484 build" and device.capability >= (8, 0)
    with pytest.raises(cuda.LaunchError) as refused:
        cuda.check_amd_device(0, "6.4.43484", "2.13.0+rocm6.4", {}, ranks_on_node=2, topology=nodes)
    line = str(refused.value)
    assert "2 rank(s) of torch 2.13.0+rocm6.4's ROCm 6.4.43484 build" in line and "enumerates 1 AMD GPU" in line
    assert line.count("HINT:") == 1 and "CUDA" not in line.split("HINT:")[1], "no CUDA build is offered for AMD GPUs"


@pytest.fixture
def checks(standin_checks: Checks) -> Checks:
    return standin_checks
