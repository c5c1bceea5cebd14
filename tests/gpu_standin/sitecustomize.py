"""Stand-in GPUs (tests only; tests/gpu_standin.py puts this folder first on PYTHONPATH): torch, when a
process imports it, reports the NVIDIA GPUs that the driver directory lists, as CUDA would show them
(none under a driver older than the build needs), with the compute capability and CUDA build the test
asks for, and fails at the first CUDA call.

The GPUs themselves are what /proc/driver/nvidia/gpus lists (the test bind-mounts a made-up driver
directory there, in a mount namespace), so snakeddp's own counting, which reads that directory, meets
them as it would real ones. The count here applies CUDA_VISIBLE_DEVICES by CUDA's rule on its own
(indices in order up to the first that names no GPU), not through snakeddp's code.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

CAPABILITY = tuple(int(part) for part in os.environ["SNAKEDDP_STANDIN_GPU_CAPABILITY"].split("."))
BUILD = os.environ["SNAKEDDP_STANDIN_GPU_BUILD"]
# torch 2.13's TORCH_CUDA_ARCH_LIST per build, x86_64 (torch/cuda/__init__.py, PYTORCH_RELEASES_CODE_CC).
ARCHS = {
    "13.0": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "13.2": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "12.6": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
}


# The oldest driver a CUDA major release runs under: with an older one, CUDA finds no device, and torch
# reports none (NVIDIA's CUDA compatibility guide).
OLDEST_DRIVER = {"13": (580, 0), "12": (525, 60)}


def _driver_runs_build() -> bool:
    line = Path("/proc/driver/nvidia/version").read_text().split("Kernel Module", 1)[1].split()[0]
    return tuple(int(part) for part in line.split(".")[:2]) >= OLDEST_DRIVER[BUILD.split(".")[0]]


def _listed() -> list[str]:
    """The models the driver lists, in bus order."""
    folders = sorted(Path("/proc/driver/nvidia/gpus").glob("*"))
    return [
        line.split(":", 1)[1].strip()
        for folder in folders
        for line in (folder / "information").read_text().splitlines()
        if line.startswith("Model:")
    ]


def _visible() -> list[str]:
    listed = _listed() if _driver_runs_build() else []
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        return listed
    shown: list[str] = []
    taken: set[int] = set()
    for entry in os.environ["CUDA_VISIBLE_DEVICES"].split(","):
        entry = entry.strip()
        if not entry.isdigit() or int(entry) >= len(listed) or int(entry) in taken:
            break
        taken.add(int(entry))
        shown.append(listed[int(entry)])
    return shown


def _first_cuda_call(name: str):
    """A function of its own per name: torch._dynamo maps torch's functions by identity, one rule each."""

    def call(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"stand-in GPU: this is the first CUDA call (torch.cuda.{name}), and no real GPU is here")

    return call


def _patch(torch: object) -> None:
    cuda = torch.cuda
    torch.version.cuda = BUILD
    cuda.device_count = lambda: len(_visible())
    cuda.is_available = lambda: len(_visible()) > 0
    cuda.get_device_capability = lambda device=None: CAPABILITY
    cuda.get_device_name = lambda device=None: _visible()[0]
    cuda.get_arch_list = lambda: list(ARCHS[BUILD])
    cuda.is_bf16_supported = lambda including_emulation=True: CAPABILITY >= (8, 0)
    cuda.current_device = lambda: 0
    for name in ("set_device", "init", "_lazy_init"):
        setattr(cuda, name, _first_cuda_call(name))


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Patches torch once its own import has run (torch.cuda is imported by it)."""

    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module: object) -> None:
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterTorch())
