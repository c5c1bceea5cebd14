"""torch's ROCm build on a host with AMD GPUs, as a process there meets it: the amdgpu driver's KFD topology
under /sys/class/kfd (a tmpfs over /sys/class in a mount namespace of its own, as root) and torch's
``version.py`` saying ``hip`` (the installed wheel's, bind-mounted as tests/gpu_standin.py does for CUDA builds).
snakeddp recognises the build, counts the AMD GPUs for ``auto``, and a rank names its GPU instead of refusing
"a CPU build" with a HINT to install CUDA."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.gpu_standin import installed_torch_version_file
from tests.helpers import subprocess_env

HIP = "6.4.43484"
# Each GPU's KFD node: SIMDs (the CPU node has none), the gfx target (gfx942: MI300) and ROCr's unique id.
GPU_NODE = "cpu_cores_count 0\nsimd_count 1216\ngfx_target_version 90402\nunique_id {id}\n"
MOUNTS = (
    'mount -t tmpfs none /sys/class && mkdir -p /sys/class/kfd/kfd/topology && cp -r "$1" '
    '/sys/class/kfd/kfd/topology/nodes && mount --bind "$2" "$3" && shift 3 && exec "$@"'
)


def amd_host(root: Path, gpus: int, hip: str | None = HIP) -> list[str]:
    """The command prefix that runs a process on a host with ``gpus`` MI300s and torch's ROCm build (``hip``; None:
    the installed wheel's build as it is)."""
    nodes = root / "nodes"
    (nodes / "0").mkdir(parents=True)
    (nodes / "0" / "properties").write_text("cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\n")
    for index in range(1, gpus + 1):
        (nodes / str(index)).mkdir()
        (nodes / str(index) / "properties").write_text(GPU_NODE.format(id=4000 + index))
    installed = installed_torch_version_file()
    version = root / "version.py"
    version.write_text(re.sub(r"^hip: (.*) = .*$", rf"hip: \g<1> = {hip!r}", installed.read_text(), flags=re.M))
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", MOUNTS, "amd-host",
            str(nodes), str(version), str(installed)]  # fmt: skip


def on(host: list[str], code: str, **env: str) -> subprocess.CompletedProcess:
    """``python -c code`` on the host, whose processes HIP would show every GPU (the suite's CPU-only
    CUDA_VISIBLE_DEVICES="" hides AMD GPUs too: HIP reads it where HIP_VISIBLE_DEVICES is unset)."""
    argv = [*host, sys.executable, "-c", code]
    base = {k: v for k, v in subprocess_env().items() if k != "CUDA_VISIBLE_DEVICES"}
    return subprocess.run(argv, env={**base, **env}, capture_output=True, text=True, timeout=120, check=False)


AUTO = """
from snakeddp.config import parts, site, validate
from snakeddp.util import cudabuild
launch = lambda n: parts.Launch.of(validate({"launch": {"accelerator": "auto", "devices": n}})["launch"])
print(cudabuild.installed_hip(), cudabuild.installed_cuda())
print(site.local_accelerator(launch(1)), site.local_accelerator(launch(2)))
print(site.why_not_gpus(2).reason)
"""
RANK = "import torch; from snakeddp.environment import cuda; print(torch.version.hip); print(cuda.check_device(0))"


def test_auto_on_a_host_with_an_amd_gpu_and_torchs_rocm_build_trains_a_one_rank_run_on_it(tmp_path: Path):
    done = on(amd_host(tmp_path, gpus=1), AUTO)
    assert done.returncode == 0, done.stderr[-2000:]
    build, decided, why = done.stdout.splitlines()
    assert build == f"{HIP} None" and decided == "gpu cpu"
    assert why == "this machine shows 1 AMD GPU (AMD Instinct MI300 series (gfx942)) (torch is a ROCm build)"


def test_a_rank_of_torchs_rocm_build_names_its_amd_gpu_and_without_one_says_why_in_one_line(tmp_path: Path):
    host = amd_host(tmp_path, gpus=2)
    done = on(host, RANK)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [HIP, f"AMD Instinct MI300 series (gfx942), ROCm {HIP} build"]
    hidden = on(host, RANK, HIP_VISIBLE_DEVICES="")
    last = hidden.stderr.strip().splitlines()[-1]
    assert hidden.returncode != 0 and last.startswith("snakeddp.errors.LaunchError: the run was planned for GPUs, ")
    assert f"ROCm {HIP} build share this node" in last, last
    assert "enumerates 0 AMD GPUs of 2 installed (HIP_VISIBLE_DEVICES='' hides the others)" in last, last
    assert last.count("HINT:") == 1 and "install the CUDA" not in last


def test_torch_without_rocm_on_an_amd_host_names_the_amd_gpus_and_offers_no_cuda_build(tmp_path: Path):
    """The venv's CPU (or CUDA) torch where the GPUs are AMD's: auto trains on the CPU naming them, and a rank told
    gpu stops in one line that says why, never with a HINT to install a CUDA build (which could not drive them)."""
    host = amd_host(tmp_path, gpus=1, hip=None)
    planned = on(host, AUTO)
    assert planned.returncode == 0, planned.stderr[-2000:]
    build, decided, why = planned.stdout.splitlines()
    assert build == "None None" and decided == "cpu cpu"
    assert why.endswith("and 1 AMD GPU (AMD Instinct MI300 series (gfx942)), which need torch's ROCm build"), why
    refused = on(host, RANK)
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode != 0 and last.count("HINT:") == 1, refused.stderr[-2000:]
    assert "this node's GPUs are AMD's (1 AMD GPU (AMD Instinct MI300 series (gfx942))), which torch's CPU" in last
    assert "HINT: set launch.accelerator: cpu (AMD GPUs train with torch's ROCm build" in last
    assert "install the CUDA" not in last
