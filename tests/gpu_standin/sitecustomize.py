"""Stand-in GPUs (tests only; tests/gpu_standin.py puts this folder first on PYTHONPATH): the CUDA runtime's
side of torch, which a CPU wheel lacks, answering as a CUDA build of torch does on the machine the stand-in
makes, and failing at CUDA's initialisation (the first call that would need a real GPU).

Everything else is torch's own code. The stand-in bind-mounts a CUDA build's ``torch/version.py`` (so
``torch.version.cuda`` is the build, and snakeddp reads it from the file as from a real wheel) and puts its
``libnvidia-ml.so.1`` on LD_LIBRARY_PATH, so torch's NVML count (``_device_count_nvml``, which
``is_available`` uses once Lightning sets PYTORCH_NVML_BASED_CUDA_CHECK=1) meets the stand-in driver as it
would a real one. What is added here is what ``torch._C`` has in a CUDA build and what it answers there:

- ``_cuda_getDeviceCount`` (cudaGetDeviceCount, used without NVML and after initialisation): the driver's GPUs
  with CUDA_VISIBLE_DEVICES applied, one device at most where MIG slices are visible (a CUDA process
  enumerates a single MIG instance); 0 without a reachable driver, and 0 with torch's warning under a
  driver older than the build;
- ``_cuda_init`` (cuInit): torch's own errors for no driver and a driver too old ("The NVIDIA driver on your
  system is too old (found version 12080)"), else the stand-in's line: no real GPU is here;
- ``_cuda_getArchFlags``: the build's TORCH_CUDA_ARCH_LIST (torch 2.13 for x86_64, PYTORCH_RELEASES_CODE_CC);
- ``_cuda_setDevice`` and ``_cuda_getDevice`` initialise CUDA first, as their C++ does;
- ``_nccl_version``: the NCCL a CUDA 13 wheel carries.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.machinery
import os
import sys
import time
import warnings
from pathlib import Path

# torch 2.13's TORCH_CUDA_ARCH_LIST per build, x86_64 (torch/cuda/__init__.py, PYTORCH_RELEASES_CODE_CC).
ARCHS = {
    "13.0": "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120",
    "13.2": "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120",
    "12.6": "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90",
}
NO_DRIVER = (
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from "
    "http://www.nvidia.com/Download/index.aspx"
)
TOO_OLD = (
    "The NVIDIA driver on your system is too old (found version {found}). Please update your GPU driver by "
    "downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx Alternatively, "
    "go to: https://pytorch.org to install a PyTorch version that has been compiled with your version of the CUDA "
    "driver."
)


def _driver() -> tuple[int, list[tuple[str, list[str]]]] | None:
    """What the CUDA driver asks the kernel driver (here: the stand-in NVML): the CUDA version it supports, and
    each GPU this process may open (its device cgroup's) with its MIG slices' UUIDs; None where no driver is
    reachable (or answers an error: a version mismatch)."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit() != 0:
        return None
    version, count = ctypes.c_int(), ctypes.c_uint()
    nvml.nvmlSystemGetCudaDriverVersion(ctypes.byref(version))
    nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    found = []
    for index in range(count.value):
        handle, slices, uuid = ctypes.c_void_p(), ctypes.c_uint(), ctypes.create_string_buffer(96)
        if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
            continue  # a GPU the process's device cgroup denies (or a lost one): CUDA enumerates the others
        nvml.nvmlDeviceGetUUID(handle, uuid, 96)
        nvml.nvmlDeviceGetMaxMigDeviceCount(handle, ctypes.byref(slices))
        migs = []
        for slot in range(slices.value):
            mig = ctypes.c_void_p()
            if nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot, ctypes.byref(mig)) == 0:
                nvml.nvmlDeviceGetUUID(mig, (mig_uuid := ctypes.create_string_buffer(96)), 96)
                migs.append(mig_uuid.value.decode())
        found.append((uuid.value.decode(), migs))
    return version.value, found


def _too_old(torch: object, cuda_version: int) -> bool:
    """The CUDA runtime of a build runs under a driver of its major release or newer (minor-version
    compatibility): 13.0 needs a driver that supports CUDA 13 (580 or newer)."""
    return cuda_version // 1000 < int(torch.version.cuda.split(".")[0])


def _devices() -> list[str]:
    """The UUIDs the CUDA runtime enumerates: CUDA_VISIBLE_DEVICES applied by torch's own parser (indices,
    GPU- and MIG- UUIDs, unique prefixes), MIG-mode GPUs as their slices, one MIG slice at most."""
    import torch

    driver = _driver()
    if driver is None:
        return []
    everything = [mig for uuid, migs in driver[1] for mig in (migs or [uuid])]
    physical = [uuid for uuid, _ in driver[1]]
    wanted = torch.cuda._parse_visible_devices()
    if wanted and isinstance(wanted[0], str):
        pool = everything if wanted[0].startswith("MIG-") else physical
        chosen = [pool[i] for i in torch.cuda._transform_uuid_to_ordinals(wanted, pool)]
    else:
        chosen = []
        for index in wanted:
            if index >= len(physical):
                break
            uuid, migs = driver[1][index]
            chosen.extend(migs or [uuid])
    migs = [uuid for uuid in chosen if uuid.startswith("MIG-")]
    return migs[:1] if migs else chosen


def _device_count() -> int:
    import torch

    driver = _driver()
    if driver is not None and _too_old(torch, driver[0]):
        warnings.warn(f"CUDA initialization: {TOO_OLD.format(found=driver[0])}", stacklevel=2)
        return 0
    return len(_devices())


def _init() -> None:
    import torch

    driver = _driver()
    if driver is None:
        raise RuntimeError(NO_DRIVER)
    if _too_old(torch, driver[0]):
        raise RuntimeError(TOO_OLD.format(found=driver[0]))
    if not _devices():
        raise RuntimeError("No CUDA GPUs are available")
    _meet()
    raise RuntimeError("stand-in GPU: this is the first CUDA call (CUDA's initialisation), and no real GPU is here")


def _meet() -> None:
    """Where a test asks (SNAKEDDP_STANDIN_MEET="<folder>:<n>"), the process that reaches CUDA's initialisation
    leaves the GPUs it sees there and waits for n of them, so that n runs are known to hold their GPUs at once."""
    meeting = os.environ.get("SNAKEDDP_STANDIN_MEET")
    if not meeting:
        return
    folder, _, count = meeting.rpartition(":")
    Path(folder, str(os.getpid())).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)"))
    deadline = time.monotonic() + 120
    while len(os.listdir(folder)) < int(count) and time.monotonic() < deadline:
        time.sleep(0.05)


def _initialising(name: str):
    """A torch._C entry whose C++ initialises CUDA lazily before anything else (torch.cuda._lazy_init)."""

    def call(*args: object) -> object:
        import torch

        torch.cuda._lazy_init()
        raise AssertionError(f"torch._C.{name} after CUDA's initialisation, which the stand-in never completes")

    return call


class _Runtime:
    """torch.cuda._cudart where the build has one: present, so that _lazy_init reaches torch._C._cuda_init."""


def _patch(torch: object) -> None:
    if torch.version.cuda is None:
        return  # the stand-in's version.py is not mounted: a CPU build, as installed
    torch._C._cuda_getDeviceCount = _device_count
    torch._C._cuda_init = _init
    torch._C._cuda_getArchFlags = lambda: ARCHS[torch.version.cuda]
    torch._C._cuda_setDevice = _initialising("_cuda_setDevice")
    torch._C._cuda_getDevice = _initialising("_cuda_getDevice")
    torch._C._nccl_version = lambda: (2 << 32) | (27 << 16) | 7
    torch._C._nccl_version_suffix = lambda: b""
    torch.cuda._cudart = _Runtime()

    def runtime_entry(name: str) -> object:
        # The rest of a CUDA build's torch._C._cuda_* (streams, allocator, ...), which torch imports once
        # torch.cuda._is_compiled() says so: each initialises CUDA first, as their C++ does.
        if name.startswith("_cuda_"):
            return _initialising(name)
        raise AttributeError(f"module 'torch._C' has no attribute {name!r}")

    torch._C.__getattr__ = runtime_entry


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Adds the runtime's side once torch's own import has run (torch.cuda is imported by it). A lookup
    alone (importlib.util.find_spec, as snakeddp makes before it decides to import torch) changes nothing."""

    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module: object) -> None:
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterTorch())
