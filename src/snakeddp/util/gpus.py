"""This machine's NVIDIA GPUs as CUDA will show them to a process, found without torch or CUDA.

What a process can use is what the driver's NVML answers it (``libnvidia-ml.so.1``, through nvidia-ml-py):
it answers in WSL2 (which has no /proc/driver/nvidia), inside a container given the GPUs, and inside a
Slurm step only for the GPUs its cgroup allows, and with MIG mode on it lists each GPU's slices. Where NVML
does not answer, the kernel module's files (/proc/driver/nvidia/gpus/<PCI bus id>/information) are read,
and a GPU counts only where its device node (/dev/nvidia<minor>) is there: a container without the GPUs
on a GPU host still shows the host's /proc, and reaches none of them. Neither costs a CUDA context.

What a process then sees is filtered by CUDA_VISIBLE_DEVICES as torch parses it for CUDA
(torch.cuda._parse_visible_devices, _transform_uuid_to_ordinals): unset, every GPU; indices, in that
order up to the first that names no GPU (``0,7`` on a one-GPU machine shows one); UUIDs (``GPU-...`` or
``MIG-...``, a unique prefix will do) up to the first that names none; a repeated entry, or empty, none.
A process enumerates one MIG slice at most (NVIDIA's MIG user guide, "Device Enumeration").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DRIVER = Path("/proc/driver/nvidia")
DEVICES = Path("/dev")
VISIBLE = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Gpu:
    bus: str  # where /proc lists it; NVML's index where only NVML does
    model: str
    uuid: str
    #: (major, minor), where NVML tells it; None from /proc alone.
    capability: tuple[int, int] | None = None
    #: A MIG slice (its uuid starts MIG-), not a whole GPU.
    mig: bool = False


@dataclass(frozen=True)
class Driver:
    """What the NVIDIA driver shows this process: its version, and the GPUs the process can reach."""

    version: str | None
    #: Whole GPUs in the driver's order; a GPU in MIG mode appears as its slices (in ``slices``) instead.
    gpus: tuple[Gpu, ...] = ()
    slices: tuple[Gpu, ...] = field(default=())
    #: How many GPUs the host's kernel lists in /proc, reachable or not.
    listed: int = 0
    #: "nvml" where NVML answered, else "proc".
    source: str = "proc"

    def enumerable(self) -> list[Gpu]:
        """Every device CUDA could enumerate here, before CUDA_VISIBLE_DEVICES: whole GPUs and MIG slices."""
        return [*self.gpus, *self.slices]


def _field(text: str, name: str) -> str:
    found = re.search(rf"^{name}:\s*(.+?)\s*$", text, re.MULTILINE)
    return found.group(1) if found else ""


def _proc_version(driver: Path) -> str | None:
    try:
        first = (driver / "version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", first)
    return found.group(1) if found else first.strip()


def listed(driver: Path | None = None) -> list[tuple[Gpu, str]]:
    """Every GPU the host's NVIDIA kernel module lists in /proc, in PCI bus order, with its device minor."""
    found = []
    for folder in sorted(((driver or DRIVER) / "gpus").glob("*")):
        try:
            text = (folder / "information").read_text()
        except OSError:
            continue
        gpu = Gpu(folder.name, _field(text, "Model") or "NVIDIA GPU", _field(text, "GPU UUID"))
        found.append((gpu, _field(text, "Device Minor")))
    return found


@functools.cache
def _nvml() -> tuple[str, tuple[Gpu, ...], tuple[Gpu, ...]] | None:
    """The driver's version, whole GPUs and MIG slices as NVML answers this process; None where it does not
    (no libnvidia-ml, no driver loaded, no nvidia-ml-py). Asked once per process: the answer does not change."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        whole, slices = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            capability = tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
            gpu = Gpu(str(index), pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetUUID(handle), capability)
            try:
                mig_on = pynvml.nvmlDeviceGetMigMode(handle)[0] == 1
            except pynvml.NVMLError:
                mig_on = False  # a GPU without MIG answers Not Supported
            if not mig_on:
                whole.append(gpu)
                continue
            for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                except pynvml.NVMLError:
                    continue  # an empty slot
                name, uuid = pynvml.nvmlDeviceGetName(mig), pynvml.nvmlDeviceGetUUID(mig)
                slices.append(Gpu(f"{index}:{slot}", name, uuid, capability, mig=True))
        return pynvml.nvmlSystemGetDriverVersion(), tuple(whole), tuple(slices)
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def driver(driver: Path | None = None, devices: Path | None = None, nvml: bool = True) -> Driver:
    """What the driver shows this process: NVML's answer where it gives one, else /proc's GPUs whose device
    node is there. ``driver``/``devices``/``nvml``: other folders than /proc/driver/nvidia and /dev, NVML
    left unasked (the tests' machines)."""
    host = listed(driver)
    answered = _nvml() if nvml else None
    if answered is not None:
        version, whole, slices = answered
        return Driver(version, whole, slices, listed=len(host), source="nvml")
    reachable = tuple(gpu for gpu, minor in host if minor and ((devices or DEVICES) / f"nvidia{minor}").exists())
    return Driver(_proc_version(driver or DRIVER), reachable, listed=len(host))


def installed(driver_dir: Path | None = None) -> list[Gpu]:
    """Every device this process can reach, before CUDA_VISIBLE_DEVICES (none without a driver)."""
    return driver(driver_dir).enumerable()


def _strtoul(entry: str) -> int:
    """The leading integer of an entry as CUDA's strtoul reads it (``1gpu`` is 1), or -1."""
    found = re.match(r"[+-]?\d+", entry)
    return int(found.group()) if found else -1


def apply_visible(seen: Driver, env: Mapping[str, str]) -> list[Gpu]:
    """The devices a process started with ``env`` enumerates, in CUDA's order."""
    if VISIBLE not in env:
        chosen = seen.enumerable()
    else:
        chosen = []
        setting = env[VISIBLE]
        entries = setting.split(",")
        if setting.startswith(("GPU-", "MIG-")):
            prefix = setting[:4]
            pool = seen.slices if prefix == "MIG-" else seen.gpus
            for entry in entries:
                if not entry.startswith(prefix):
                    break
                named = [gpu for gpu in pool if gpu.uuid.startswith(entry)]
                if len(named) != 1:
                    break  # no GPU, or several: CUDA stops there
                if named[0] in chosen:
                    return []  # a repeated entry hides every GPU
                chosen.append(named[0])
        else:
            for entry in entries:
                index = _strtoul(entry.strip())
                if not 0 <= index < len(seen.gpus):
                    break  # a negative entry, or one past the last GPU, ends the list
                if seen.gpus[index] in chosen:
                    return []
                chosen.append(seen.gpus[index])
    slices = [gpu for gpu in chosen if gpu.mig]
    return slices[:1] if slices else chosen


def visible(env: Mapping[str, str], driver_dir: Path | None = None) -> list[Gpu]:
    """The GPUs a process started with ``env`` sees, in CUDA's order."""
    return apply_visible(driver(driver_dir), env)


def driver_version(driver_dir: Path | None = None) -> str | None:
    """The loaded NVIDIA driver's version (570.86.15), or None when none is loaded."""
    return driver(driver_dir).version


def describe(env: Mapping[str, str], driver_dir: Path | None = None, seen: Driver | None = None) -> str:
    """What this machine shows a process, for a message: '1 GPU (NVIDIA A100-SXM4-40GB)', 'no GPU (...)'."""
    seen = seen or driver(driver_dir)
    shown, reachable = apply_visible(seen, env), seen.enumerable()
    setting = f"{VISIBLE}={env[VISIBLE]!r}" if VISIBLE in env else None
    if not reachable and seen.listed:
        return (
            f"no GPU this process can reach (the host's driver lists {seen.listed}, and no NVIDIA library or "
            "device reaches them here: a container or job without GPU access)"
        )
    if not reachable:
        return "no GPU (no NVIDIA driver lists one)"
    models = ", ".join(sorted({gpu.model for gpu in shown}))
    if not shown:
        return f"no GPU visible ({len(reachable)} installed, {setting} hides them)"
    if setting is None and len(shown) < len(reachable):
        return f"{len(shown)} GPU ({models}; a process enumerates one MIG slice of the {len(reachable)})"
    hidden = f"; {len(reachable) - len(shown)} more hidden by {setting}" if len(shown) < len(reachable) else ""
    return f"{len(shown)} GPU{'s' if len(shown) > 1 else ''} ({models}{hidden})"
