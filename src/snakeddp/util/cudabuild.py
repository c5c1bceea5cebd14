"""What a CUDA build of torch runs on, known without torch or a GPU: the compute capabilities each build
of ``environment.cuda`` has kernels for, the oldest driver each CUDA release runs under, the build of the
torch this interpreter would import (read from its ``torch/version.py``, as the wheel wrote it), and the
capability of the GPU models schedulers and clouds name (Slurm's GRES types, VM sizes).

The tables follow torch's own (torch/cuda/__init__.py: DEVICE_REQUIREMENT's rule that kernels for X.Y run
on X.Y to X.9, PYTORCH_RELEASES_CODE_CC for x86_64) and NVIDIA's minimum drivers per CUDA major release
(minor-version compatibility), and NVIDIA's "CUDA GPUs" list for the models' capabilities.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# Compute capabilities (x 10) each build of environment.cuda has kernels for (torch 2.12-2.14, x86_64).
BUILD_CAPABILITIES = {
    "13.0": (75, 80, 86, 90, 100, 120),
    "13.2": (75, 80, 86, 90, 100, 120),
    "12.6": (50, 60, 70, 75, 80, 86, 90),
}
# The oldest driver each CUDA major release runs under (NVIDIA's CUDA compatibility guide).
MIN_DRIVER = {13: (580, 0), 12: (525, 60), 11: (450, 80)}
# Compute capability (x 10) of the GPU models Slurm GRES types, cloud VM sizes and node types name, lower case.
MODEL_CAPABILITIES = {
    "k80": 37, "p4": 61, "p40": 61, "p100": 60, "v100": 70, "v100s": 70, "t4": 75, "rtx6000": 75, "rtx8000": 75,
    "a100": 80, "a30": 80, "a10": 86, "a10g": 86, "a16": 86, "a40": 86, "a6000": 86, "l4": 89, "l40": 89, "l40s": 89,
    "h100": 90, "h200": 90, "gh200": 90, "b200": 100, "gb200": 100, "b300": 103, "rtx6000ada": 89,
}  # fmt: skip


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


def _version(driver: str) -> tuple[int, ...]:
    return tuple(int(part) for part in driver.split(".")[:2] if part.isdigit())


def builds_under(driver: str | None) -> list[str]:
    """The environment.cuda builds a driver of this version runs (all when unknown)."""
    if not driver:
        return list(BUILD_CAPABILITIES)
    return [cuda for cuda in BUILD_CAPABILITIES if _version(driver) >= MIN_DRIVER[int(cuda.split(".")[0])]]


def driver_needed(cuda: str) -> tuple[int, int] | None:
    """The oldest driver a CUDA build runs under ((580, 0) for 13.x), None where unknown."""
    return MIN_DRIVER.get(int(cuda.split(".")[0]))


def driver_too_old(driver: str | None, cuda: str | None) -> bool:
    """Whether a driver of this version is older than a CUDA build needs (False where either is unknown)."""
    needed = driver_needed(cuda) if cuda else None
    return bool(driver and needed and _version(driver) < needed)


#: "1" where the config declares NVIDIA's forward compatibility (environment.cuda_forward_compat): the nodes'
#: CUDA driver library is cuda-compat's, newer than their kernel driver. Exported by the workflow to its jobs
#: (snakeddp.run.variables), read here by the checks of the workflow and of every rank.
FORWARD_COMPAT = "SNAKEDDP_CUDA_FORWARD_COMPAT"
# NVIDIA's forward compatibility serves data-centre GPUs (and a few NGC-ready RTX SKUs), never these.
CONSUMER_MODELS = re.compile(r"geforce|titan", re.IGNORECASE)


def forward_compat_declared(env: Mapping[str, str]) -> bool:
    """Whether the config declares NVIDIA's forward compatibility for the nodes (environment.cuda_forward_compat)."""
    return env.get(FORWARD_COMPAT) == "1"


def consumer_models(models: Iterable[str]) -> list[str]:
    """The GPU models NVIDIA's forward compatibility does not serve (GeForce, TITAN)."""
    return sorted({model for model in models if CONSUMER_MODELS.search(model)})


def loaded_cuda_driver() -> int | None:
    """The CUDA version (13000 for 13.0) of the driver library this process loads, libcuda.so.1 as the dynamic
    loader finds it (LD_LIBRARY_PATH first: cuda-compat's, where it is put there), asked with cuDriverGetVersion,
    which initialises nothing; None where there is none (no NVIDIA driver here) or it does not answer."""
    try:
        library = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if library.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return version.value


def forward_compat_covers(env: Mapping[str, str], models: Iterable[str]) -> bool:
    """Whether a driver older than the build is made up for by declared forward compatibility (cuda-compat):
    declared, and every one of these GPUs is of a kind it serves."""
    return forward_compat_declared(env) and not consumer_models(models)


def has_kernels(cuda: str, capability: int) -> bool:
    """Whether the build has kernels for a device of this capability (x 10); True for a build not in the table."""
    codes = BUILD_CAPABILITIES.get(cuda)
    return codes is None or any(runs_on(code, capability) for code in codes)


def model_capability(name: str) -> int | None:
    """The compute capability (x 10) of a GPU model a scheduler or cloud names (``v100``, ``a100_80gb``,
    ``NVIDIA H100 80GB HBM3``, ``nvidia_a100-sxm4-80gb``), None for a model not in the table."""
    words = re.split(r"[^a-z0-9]+", name.lower())
    for word in words:
        if word in MODEL_CAPABILITIES:
            return MODEL_CAPABILITIES[word]
    return None


def read_version_file(version_file: Path) -> Any:
    """torch's generated ``torch/version.py`` (version and accelerator builds), loaded without importing torch;
    None where there is none."""
    spec = importlib.util.spec_from_file_location("_snakeddp_torch_version", version_file)
    if spec is None or spec.loader is None or not version_file.is_file():
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def installed_torch() -> bool:
    """Whether this interpreter would import a torch at all."""
    return importlib.util.find_spec("torch") is not None


def _installed_build() -> Any:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    return read_version_file(Path(spec.origin).parent / "version.py")


def installed_cuda() -> str | None:
    """The CUDA release the torch this interpreter imports was built for ("13.0"), None for a CPU or ROCm build
    or no torch: what the workflow's jobs run where they share its interpreter."""
    return getattr(_installed_build(), "cuda", None)


def installed_hip() -> str | None:
    """The ROCm (HIP) release the torch this interpreter imports was built for ("6.4.43484"), None for any other
    build: torch's ROCm build drives AMD GPUs through the same torch.cuda API (and NCCL's name for RCCL)."""
    return getattr(_installed_build(), "hip", None)


def ranks_build(environment_cuda: str | None, same_interpreter: bool) -> str | None:
    """The CUDA build of torch a cluster's ranks will run, as the workflow can tell before submitting:
    the installed torch's where the jobs share this interpreter (the checkout's .venv) and it is a CUDA
    build, else ``environment.cuda`` (what --sdm conda and the image install, and what tools/setup.sh --cuda
    puts into .venv); None for "cpu", and for a ROCm build there (no NVIDIA model is refused for it)."""
    installed = installed_cuda() if same_interpreter else None
    if installed:
        return installed
    if same_interpreter and installed_hip():
        return None
    return None if environment_cuda in (None, "cpu") else environment_cuda
