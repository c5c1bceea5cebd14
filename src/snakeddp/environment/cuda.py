"""A GPU rank's checks of torch's CUDA build against this node, before its first CUDA call.

The workflow decides cpu or gpu once (``snakeddp.config.site``) and every rank is told. A rank told
gpu never falls back to the CPU: when it sees no GPU it says why in one line (a CPU build of torch,
CUDA_VISIBLE_DEVICES hiding the GPUs, a container or job without GPU access, no driver); under a driver
older than the build needs it names both before CUDA would raise "The NVIDIA driver on your system is
too old"; when the device's compute capability has no kernels in the build (a V100, 7.0, under the CUDA
13 builds, whose kernels start at 7.5) it stops before the first kernel's "no kernel image is
available", naming the GPU, its capability, the build and the build that serves it; and more ranks on
the node than devices it enumerates (MIG slices: one a process) stop before Lightning's device check.
Each HINT names the command that installs that build into .venv (``tools/setup.sh --cuda``), and only a build
whose lock in this checkout has hashes (every installer refuses the others): where the build that would
serve is not locked here, the line says so, how a maintainer locks it, and what works meanwhile. A driver
older than the build passes where the config declares NVIDIA's forward compatibility
(environment.cuda_forward_compat: cuda-compat's driver library on data-centre GPUs).

torch's ROCm build (``torch.version.hip``) trains on AMD GPUs through the same torch.cuda API, and
Lightning's "nccl" backend is RCCL there: a rank of it is checked against the AMD GPUs it enumerates
(``snakeddp.util.amdgpus``), not refused as a CPU build.

Everything is asked of the driver's NVML (``snakeddp.util.gpus``) and of torch's build (its version and
arch list), none of which initialises CUDA: the first CUDA call is Lightning's, after these pass.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from snakeddp.environment.builds import BUILDS
from snakeddp.errors import LaunchError, MachineRefusal
from snakeddp.util import amdgpus, gpus
from snakeddp.util.cudabuild import (
    BUILD_CAPABILITIES,
    MIN_DRIVER,
    arch_capabilities,
    builds_for,
    builds_under,
    consumer_models,
    driver_needed,
    driver_too_old,
    forward_compat_covers,
    forward_compat_declared,
    loaded_cuda_driver,
    runs_on,
)

__all__ = ["BUILD_CAPABILITIES", "MIN_DRIVER", "Device", "arch_capabilities", "builds_for", "builds_under", "runs_on"]


@dataclass(frozen=True)
class Device:
    """The GPU a rank trains on, as the checks found it."""

    name: str
    capability: tuple[int, int]
    cuda: str
    #: torch's ROCm release where the GPU is AMD's (``cuda`` is then empty, ``capability`` the gfx target's).
    hip: str | None = None

    def __str__(self) -> str:
        if self.hip:
            return f"{self.name}, ROCm {self.hip} build"
        return f"{self.name}, compute capability {self.capability[0]}.{self.capability[1]}, CUDA {self.cuda} build"


# What works whatever torch build is installed: the CPU (launch.accelerator: cpu trains there, as planned).
ON_THE_CPU = "set launch.accelerator: cpu"


def locked(cuda: str) -> bool | None:
    """Whether this checkout's lock of the build has hashes, which every installer requires (snakeddp.environment.
    files.locked_build); None where there is no checkout's envs/ to tell (an installed package, an image)."""
    from snakeddp.environment import files  # only on the way to a refusal: the lock's parser is not a rank's import

    if not (files.ENVS / files.LOCK_NAME).is_file():
        return None
    return files.build_lock(BUILDS[cuda], files.ENVS) is not None


def install_hint(choices: list[str]) -> str:
    """How to put the first of these builds that this checkout can install into the environment the ranks run in;
    where none of them is locked here, that, how a maintainer locks the first, and what works meanwhile."""
    if not choices:
        return f"no build of this torch release serves it; run on other GPUs, or {ON_THE_CPU}"
    ready = [cuda for cuda in choices if locked(cuda) is not False]
    if ready:
        cuda = ready[0]
        return (
            f'install the CUDA {cuda} build: environment.cuda: "{cuda}" in the config and `tools/setup.sh --cuda '
            f"{cuda}` for .venv (conda envs and the image follow environment.cuda)"
        )
    cuda = choices[0]
    index = BUILDS[cuda].index_url
    return (
        f"{ON_THE_CPU} (the CUDA {cuda} build would serve it, and this checkout has not locked it: "
        f"envs/requirements-torch-{cuda}.lock has no hashes, which every installer requires; a maintainer locks it "
        f"by running tools/lock.sh where {index} answers and committing envs/)"
    )


def driver_hint(driver: str, cuda: str, models: list[str]) -> str:
    """What serves a driver older than the CUDA build: a newer one, NVIDIA's forward compatibility where these GPUs
    are of a kind it serves (data-centre), or a build this checkout has locked that the driver runs."""
    needed = driver_needed(cuda) if cuda else None
    newer = f"{needed[0] if needed else '?'} or newer"
    consumer = consumer_models(models)
    if consumer:
        compat = f" (NVIDIA's forward compatibility does not serve {', '.join(consumer)}: data-centre GPUs only)"
    else:
        compat = (
            ", or declare NVIDIA's forward compatibility where cuda-compat is installed on these data-centre GPUs "
            '(--config "environment={cuda_forward_compat: true}")'
        )
    return f"update the driver to {newer}{compat}, or {install_hint(builds_under(driver))}"


def driver_refusal(driver: str, cuda: str, torch_version: str, where: str, models: list[str] | None = None) -> str:
    """The one line for a driver older than the build: what CUDA would raise, said before it is called, and what
    would serve (``driver_hint``)."""
    needed = driver_needed(cuda)
    return (
        f"the NVIDIA driver {where} is {driver}, older than torch {torch_version}'s CUDA {cuda} build needs "
        f'({needed[0] if needed else "?"} or newer): CUDA would stop every GPU rank with "The NVIDIA driver on your '
        f'system is too old". HINT: {driver_hint(driver, cuda, models or [])}.'
    )


def why_no_device(torch_cuda: str | None, env: Mapping[str, str], seen: gpus.Driver) -> tuple[str, str]:
    """Why a rank sees no GPU where GPUs were decided, and what to do: (reason, HINT)."""
    amd = amdgpus.visible(env) if not gpus.apply_visible(seen, env) else []
    if amd:
        return (
            f"this node's GPUs are AMD's ({amdgpus.describe(env)}), which torch's "
            f"{f'CUDA {torch_cuda}' if torch_cuda else 'CPU'} build cannot drive",
            f"{ON_THE_CPU} (AMD GPUs train with torch's ROCm build, which snakeddp runs and this checkout does not "
            "lock: docs/environments.md)",
        )
    if torch_cuda is None and not (seen.version or seen.listed or seen.enumerable()):
        # Nothing here for a CUDA build to drive either: the first remedy is the one that trains on this node.
        return (
            "torch is a CPU build, and this node has no NVIDIA GPU",
            f"{ON_THE_CPU} to train here; for GPUs, run on GPU nodes and {install_hint(builds_under(None))}",
        )
    if torch_cuda is None:
        return "torch is a CPU build", install_hint(builds_under(seen.version))
    if seen.failure():
        return f"{seen.failure()}, and CUDA would fail alike", f"{gpus.remedy(seen)}, or set launch.accelerator: cpu"
    if seen.enumerable():
        return (
            f"{gpus.VISIBLE} hides the GPUs",
            f"leave {gpus.VISIBLE} unset (or list the GPUs the run may use), or set launch.accelerator: cpu",
        )
    return (
        "no GPU is allocated to this process",
        "run on nodes with GPUs allocated to the job and a torch built for their driver (environment.cuda, "
        "docs/environments.md), or set launch.accelerator: cpu",
    )


def check_driver(
    driver: str | None, cuda: str, models: list[str], torch_version: str, host: str, env: Mapping[str, str]
) -> None:
    """A driver older than the build, refused in one line (a MachineRefusal) unless declared forward compatibility
    serves these GPUs and the CUDA driver library this process loads is cuda-compat's, new enough for the build."""
    if not driver or not driver_too_old(driver, cuda):
        return
    if not forward_compat_covers(env, models):
        if forward_compat_declared(env):  # declared, and a GPU here is one cuda-compat does not serve
            models = consumer_models(models)
        raise MachineRefusal(driver_refusal(driver, cuda, torch_version, f"on {host}", models))
    loaded = loaded_cuda_driver()
    if loaded is not None and loaded // 1000 < int(cuda.split(".")[0]):
        raise MachineRefusal(
            f"environment.cuda_forward_compat is declared, and the CUDA driver library this process on {host} loads "
            f"(libcuda.so.1) is CUDA {loaded // 1000}.{loaded % 1000 // 10}'s, the NVIDIA driver {driver}'s own, older "
            f"than torch {torch_version}'s CUDA {cuda} build needs: cuda-compat is not first on LD_LIBRARY_PATH, and "
            f'CUDA would stop every GPU rank with "The NVIDIA driver on your system is too old". HINT: put '
            f"cuda-compat's folder first on the jobs' LD_LIBRARY_PATH (NVIDIA's cuda-compat-{cuda.replace('.', '-')} "
            f"package installs /usr/local/cuda-{cuda}/compat), or update the driver to "
            f"{driver_needed(cuda)[0] if driver_needed(cuda) else '?'} or newer."
        )


def check_device(local_rank: int, env: Mapping[str, str] = os.environ, *, ranks_on_node: int = 1) -> Device:
    """The GPU this rank will train on, checked against torch's build and the driver; a one-line LaunchError
    otherwise (a MachineRefusal, not retried, for what any node like this one would refuse again: the build,
    the driver, MIG, the GPU's capability). No call here initialises CUDA."""
    import torch

    host = platform.node()
    hip = getattr(torch.version, "hip", None)
    if hip:
        return check_amd_device(local_rank, hip, torch.__version__, env, ranks_on_node=ranks_on_node)
    seen = gpus.driver()
    shown = gpus.apply_visible(seen, env)
    cuda = torch.version.cuda
    if cuda is None or not shown:
        reason, hint = why_no_device(cuda, env, seen)
        build = f"CUDA {cuda} build" if cuda else "a CPU build"
        # A CPU build is refused wherever it lands; GPUs hidden or not allocated may be this node's alone.
        raise (LaunchError if cuda else MachineRefusal)(
            f"the run was planned for GPUs, and torch sees no CUDA device on {host} (NVIDIA driver: "
            f"{seen.version or 'none loaded'}; torch {torch.__version__}, {build}; {gpus.VISIBLE}="
            f"{env.get(gpus.VISIBLE, '(unset)')}; this node shows {gpus.describe(env, seen=seen)}): {reason}, and a "
            f"GPU run never trains on the CPU instead. HINT: {hint}."
        )
    check_driver(seen.version, cuda, [gpu.model for gpu in shown], torch.__version__, host, env)
    if ranks_on_node > len(shown):
        slices = " (MIG slices: a CUDA process enumerates one)" if any(gpu.mig for gpu in shown) else ""
        raise MachineRefusal(
            f"{ranks_on_node} ranks on {host}, and each process there enumerates {len(shown)} CUDA device"
            f"{'s' if len(shown) > 1 else ''}{slices}: every rank past it would stop in Lightning's device check. "
            f"HINT: set launch.devices: {len(shown)} (more nodes for more ranks), or run on whole GPUs."
        )
    gpu = shown[local_rank % len(shown)]
    # Where only /proc was read, the capability is CUDA's to tell; the driver is known to run the build by now.
    major, minor = gpu.capability or torch.cuda.get_device_capability(local_rank % len(shown))
    codes = arch_capabilities(torch.cuda.get_arch_list())
    if codes and not any(runs_on(code, 10 * major + minor) for code in codes):
        kernels = ", ".join(f"{code // 10}.{code % 10}" for code in sorted(set(codes)))
        raise MachineRefusal(
            f"{gpu.model} on {host} has compute capability {major}.{minor}, and torch {torch.__version__}'s CUDA "
            f"{cuda} build has kernels for {kernels} only: its first kernel would fail with "
            f'"no kernel image is available". HINT: {install_hint(builds_for(10 * major + minor))}.'
        )
    return Device(gpu.model, (major, minor), cuda)


def check_amd_device(
    local_rank: int,
    hip: str,
    torch_version: str,
    env: Mapping[str, str],
    *,
    ranks_on_node: int = 1,
    topology: Path = amdgpus.TOPOLOGY,
) -> Device:
    """The AMD GPU a rank of torch's ROCm build trains on (torch.cuda's device ``local_rank``); a one-line
    LaunchError where the process enumerates none, or fewer than the node's ranks. No HIP call is made."""
    host = platform.node()
    shown = amdgpus.visible(env, topology)
    if len(shown) < max(ranks_on_node, 1):
        seen = f"{amdgpus.describe(env, topology)} on {host} (the amdgpu driver's KFD topology)"
        raise LaunchError(
            f"the run was planned for GPUs, {ranks_on_node} rank(s) of torch {torch_version}'s ROCm {hip} build "
            f"share this node, and the process enumerates {seen}: a GPU run never trains on the CPU instead. HINT: "
            "run on nodes with AMD GPUs allocated to the job (one a rank), leave ROCR_VISIBLE_DEVICES and "
            f"HIP_VISIBLE_DEVICES unset (or list the GPUs the run may use), or {ON_THE_CPU}."
        )
    gpu = shown[local_rank % len(shown)]
    target = int(gpu.gfx[3:-2]) if gpu.gfx[3:-2].isdigit() else 0
    return Device(gpu.model, (target, 0), "", hip=hip)
