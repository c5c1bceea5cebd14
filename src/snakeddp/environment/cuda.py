"""A GPU rank's checks of torch's CUDA build against this node, before its first CUDA call.

The workflow decides cpu or gpu once (``snakeddp.config.site``) and every rank is told. A rank told
gpu never falls back to the CPU: when torch sees no CUDA device it says why in one line (a CPU build
of torch, CUDA_VISIBLE_DEVICES hiding the GPUs, a driver older than the build needs, no driver), and
when the device's compute capability has no kernels in the build (a V100, 7.0, under the CUDA 13
builds, whose kernels start at 7.5) it stops before the first kernel's "no kernel image is
available", naming the GPU, its capability, the build and the build that serves it. Each HINT names
the command that installs that build into .venv (``tools/setup.sh --cuda``).

The tables follow torch's own (torch/cuda/__init__.py: DEVICE_REQUIREMENT's rule that kernels for
X.Y run on X.Y to X.9, PYTORCH_RELEASES_CODE_CC for x86_64) and NVIDIA's minimum drivers per CUDA
major release (minor-version compatibility). The checks ask torch only for the device count, names and
capabilities: no kernel runs, and nothing is allocated on a GPU, before they pass.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

from snakeddp.errors import LaunchError
from snakeddp.util import gpus

# Compute capabilities (x 10) each build of environment.cuda has kernels for (torch 2.12-2.14, x86_64).
BUILD_CAPABILITIES = {
    "13.0": (75, 80, 86, 90, 100, 120),
    "13.2": (75, 80, 86, 90, 100, 120),
    "12.6": (50, 60, 70, 75, 80, 86, 90),
}
# The oldest driver each CUDA major release runs under (NVIDIA's CUDA compatibility guide).
MIN_DRIVER = {13: (580, 0), 12: (525, 60), 11: (450, 80)}


def runs_on(code: int, device: int) -> bool:
    """Whether kernels compiled for capability ``code`` run on a ``device`` (both x 10): the same major, a
    minor at least the code's (sm_80 runs on 8.6, never on 9.0 or 7.5), as torch itself judges."""
    return device // 10 == code // 10 and device % 10 >= code % 10


def arch_capabilities(arch_list: list[str]) -> list[int]:
    """torch.cuda.get_arch_list()'s entries (sm_75, compute_120) as capabilities x 10."""
    return [int(arch.rpartition("_")[2]) for arch in arch_list if arch.rpartition("_")[2].isdigit()]


def builds_for(device: int) -> list[str]:
    """The environment.cuda builds with kernels for a device of this capability (x 10)."""
    return [cuda for cuda, codes in BUILD_CAPABILITIES.items() if any(runs_on(code, device) for code in codes)]


def builds_under(driver: str | None) -> list[str]:
    """The environment.cuda builds a driver of this version runs (all when unknown)."""
    if not driver:
        return [cuda for cuda in BUILD_CAPABILITIES]
    have = tuple(int(part) for part in driver.split(".")[:2] if part.isdigit())
    return [cuda for cuda in BUILD_CAPABILITIES if have >= MIN_DRIVER[int(cuda.split(".")[0])]]


def install_hint(choices: list[str]) -> str:
    """How to put the first of these builds into the environment the ranks run in."""
    if not choices:
        return "no build of this torch release serves it; run on other GPUs"
    cuda = choices[0]
    return (
        f'install the CUDA {cuda} build: environment.cuda: "{cuda}" in the config and `tools/setup.sh --cuda {cuda}` '
        "for .venv (conda envs and the image follow environment.cuda)"
    )


def why_no_device(torch_cuda: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """Why torch sees no CUDA device where GPUs were decided, and what to do: (reason, HINT)."""
    driver = gpus.driver_version()
    if torch_cuda is None:
        return "torch is a CPU build", install_hint(builds_under(driver))
    needed = MIN_DRIVER.get(int(torch_cuda.split(".")[0]))
    if driver and needed and tuple(int(p) for p in driver.split(".")[:2]) < needed:
        return (
            f"the driver is older than the CUDA {torch_cuda} build needs ({needed[0]} or newer)",
            install_hint(builds_under(driver)) + ", or update the driver",
        )
    if gpus.installed() and not gpus.visible(env):
        return (
            f"{gpus.VISIBLE} hides the GPUs",
            f"leave {gpus.VISIBLE} unset (or list the GPUs the run may use), or set launch.accelerator: cpu",
        )
    return (
        "no GPU is allocated to this process",
        "run on nodes with GPUs allocated to the job and a torch built for their driver (environment.cuda, "
        "docs/environments.md), or set launch.accelerator: cpu",
    )


def check_device(local_rank: int, env: Mapping[str, str] = os.environ) -> str:
    """The GPU this rank will train on, checked against torch's build; a one-line LaunchError otherwise.
    Returns what it found ('NVIDIA A100-SXM4-40GB, compute capability 8.0, CUDA 13.0 build')."""
    import torch

    host = platform.node()
    if not torch.cuda.is_available():
        reason, hint = why_no_device(torch.version.cuda, env)
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU build"
        raise LaunchError(
            f"the run was planned for GPUs, and torch sees no CUDA device on {host} (NVIDIA driver: "
            f"{gpus.driver_version() or 'none loaded'}; torch {torch.__version__}, {build}; {gpus.VISIBLE}="
            f"{env.get(gpus.VISIBLE, '(unset)')}; this node shows {gpus.describe(env)}): {reason}, and a GPU run "
            f"never trains on the CPU instead. HINT: {hint}."
        )
    device = local_rank % torch.cuda.device_count()
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    codes = arch_capabilities(torch.cuda.get_arch_list())
    found = f"{name}, compute capability {major}.{minor}, CUDA {torch.version.cuda} build"
    if codes and not any(runs_on(code, 10 * major + minor) for code in codes):
        kernels = ", ".join(f"{code // 10}.{code % 10}" for code in sorted(set(codes)))
        raise LaunchError(
            f"{name} on {host} has compute capability {major}.{minor}, and torch {torch.__version__}'s CUDA "
            f"{torch.version.cuda} build has kernels for {kernels} only: its first kernel would fail with "
            f'"no kernel image is available". HINT: {install_hint(builds_for(10 * major + minor))}.'
        )
    return found
