"""This machine's NVIDIA GPUs as CUDA will show them to a process, found without torch or CUDA.

What a process can use is what the driver's NVML answers it (``libnvidia-ml.so.1``, through nvidia-ml-py):
it answers in WSL2 (which has no /proc/driver/nvidia), inside a container given the GPUs, and with MIG mode
on it lists each GPU's slices. Inside a device cgroup (a Slurm step, an salloc shell, ``docker --gpus
device=N``) NVML counts every GPU of the host and answers NO_PERMISSION for the handles of those the cgroup
denies: those are skipped, the rest kept, as CUDA enumerates only the allowed ones. Where there is no NVML
(or no driver loaded), the kernel module's files (/proc/driver/nvidia/gpus/<PCI bus id>/information) are
read, and a GPU counts only where its device node (/dev/nvidia<minor>) opens: a container without the GPUs
on a GPU host still shows the host's /proc, and reaches none of them, and a cgroup refuses the open of a GPU
it denies. Neither costs a CUDA context.

Where NVML is there and fails (a driver/library version mismatch after a driver upgrade without a reboot, a
lost GPU), or does not answer within ``nvml_timeout_s()`` (a GPU fallen off the bus blocks nvmlInit), CUDA would
fail or block alike: no GPU is usable, and ``Driver.problem`` quotes NVML's own words for the line that
refuses or falls back to the CPU. The query runs on a thread of its own, abandoned when it does not answer.

What a process then sees is filtered by CUDA_VISIBLE_DEVICES as torch parses it for CUDA
(torch.cuda._parse_visible_devices, _transform_uuid_to_ordinals): unset, every GPU; indices, in that
order up to the first that names no GPU (``0,7`` on a one-GPU machine shows one), each index a GPU the
process may open in the driver's order (Slurm's ``0`` in a one-GPU step is its GPU, whatever the host's
index), a GPU in MIG mode shown as its slices; UUIDs (``GPU-...`` or ``MIG-...``, a unique prefix will do)
up to the first that names none; a repeated entry, or empty, none. A process enumerates one MIG slice at
most (NVIDIA's MIG user guide, "Device Enumeration").
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from snakeddp.errors import ConfigError
from snakeddp.util import settings

DRIVER = Path("/proc/driver/nvidia")
DEVICES = Path("/dev")
VISIBLE = "CUDA_VISIBLE_DEVICES"
#: How long NVML's answer is waited for: it takes well under a second on a healthy host. ``NVML_TIMEOUT_VARIABLE``
#: sets another in every process of a workflow (more where nvmlInit is slow but answers: many GPUs without
#: persistence mode; less where waiting on a GPU known to be lost costs each process, as the tests' does).
NVML_TIMEOUT_S = 5.0
NVML_TIMEOUT_VARIABLE = "SNAKEDDP_NVML_TIMEOUT_S"
# nvmlReturn_t's values (nvml.h): a process its cgroup denies a GPU; no NVML or no driver (read /proc instead).
NVML_NO_PERMISSION = 4
NVML_ABSENT = (9, 12)  # DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND


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
    #: GPUs NVML counts and denies this process (NO_PERMISSION: a device cgroup's), or whose node does not open.
    denied: int = 0
    #: NVML's words for the GPUs it counts and answers an error for but NO_PERMISSION ('GPU 1: "GPU is lost"').
    unanswered: tuple[str, ...] = ()
    #: Why no GPU is usable although a driver is there, in NVML's words ('NVML answers "Driver/library version
    #: mismatch"', 'NVML did not answer within 5 s'); None where NVML answered or is absent.
    problem: str | None = None

    def enumerable(self) -> list[Gpu]:
        """Every device CUDA could enumerate here, before CUDA_VISIBLE_DEVICES: whole GPUs and MIG slices."""
        return [*self.gpus, *self.slices]

    def failure(self) -> str | None:
        """NVML's words where none of the GPUs is usable for an error of NVML's (its whole answer's, or every
        GPU's), else None."""
        if self.problem:
            return self.problem
        if self.unanswered and not self.enumerable():
            return f"NVML answers {', '.join(self.unanswered)}"
        return None

    def indexed(self) -> list[list[Gpu]]:
        """What index-style CUDA_VISIBLE_DEVICES counts: each GPU the process may open, in the driver's order,
        as itself or (in MIG mode) as its slices."""
        parents: dict[str, list[Gpu]] = {}
        for gpu in self.slices:
            parents.setdefault(gpu.bus.partition(":")[0], []).append(gpu)
        units = [(gpu.bus, [gpu]) for gpu in self.gpus] + list(parents.items())
        if self.source == "nvml":  # NVML's indices: whole GPUs and MIG parents interleave as the driver orders them
            units.sort(key=lambda unit: int(unit[0]) if unit[0].isdigit() else -1)
        return [gpus for _, gpus in units]


def _field(text: str, name: str) -> str:
    found = re.search(rf"^{name}:\s*(.+?)\s*$", text, re.MULTILINE)
    return found.group(1) if found else ""


def _proc_version(driver: Path) -> str | None:
    try:
        first = (driver / "version").read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError):
        return None
    found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", first)
    return found.group(1) if found else first.strip()


def listed(driver: Path | None = None) -> list[tuple[Gpu, str]]:
    """Every GPU the host's NVIDIA kernel module lists in /proc, in PCI bus order, with its device minor."""
    found = []
    for folder in sorted(((driver or DRIVER) / "gpus").glob("*")):
        try:
            text = (folder / "information").read_text(encoding="utf-8")
        except OSError:
            continue
        gpu = Gpu(folder.name, _field(text, "Model") or "NVIDIA GPU", _field(text, "GPU UUID"))
        found.append((gpu, _field(text, "Device Minor")))
    return found


@dataclass(frozen=True)
class _Answer:
    """NVML's answer to this process: the driver's version, whole GPUs, MIG slices, how many it denies, and its
    words for the GPUs it answers another error for."""

    version: str
    whole: tuple[Gpu, ...]
    slices: tuple[Gpu, ...]
    denied: int
    unanswered: tuple[str, ...]


def _slices(pynvml, handle, index: int, capability: tuple[int, int]) -> list[Gpu] | None:
    """A GPU's MIG slices, None where MIG mode is off (or unsupported)."""
    try:
        if pynvml.nvmlDeviceGetMigMode(handle)[0] != 1:
            return None
    except pynvml.NVMLError:
        return None  # a GPU without MIG answers Not Supported
    found = []
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError:
            continue  # an empty slot, or a slice the process may not open
        name, uuid = pynvml.nvmlDeviceGetName(mig), pynvml.nvmlDeviceGetUUID(mig)
        found.append(Gpu(f"{index}:{slot}", name, uuid, capability, mig=True))
    return found


def _words(pynvml, error) -> str:
    """NVML's own text for an error (the library's nvmlErrorString: "Driver/library version mismatch"), which
    nvidia-ml-py replaces with its own for the codes it knows."""
    try:
        text = pynvml.nvmlErrorString(error.value)
        return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # any failure to ask leaves nvidia-ml-py's words
        return str(error)


def _ask_nvml() -> _Answer | str | None:
    """NVML's answer; its error in its words (a version mismatch, a lost GPU); None where there is no NVML or
    no driver loaded (no nvidia-ml-py, no libnvidia-ml, DRIVER_NOT_LOADED: /proc is read instead)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return None if error.value in NVML_ABSENT else f'NVML answers "{_words(pynvml, error)}"'
    try:
        whole, slices, denied, unanswered = [], [], 0, []
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError as error:
                # A GPU this process's device cgroup denies, or a lost one: CUDA enumerates the others.
                denied += error.value == NVML_NO_PERMISSION
                if error.value != NVML_NO_PERMISSION:
                    unanswered.append(f'GPU {index}: "{_words(pynvml, error)}"')
                continue
            capability = tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
            migs = _slices(pynvml, handle, index, capability)
            if migs is None:
                whole.append(Gpu(str(index), pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetUUID(handle),
                                 capability))  # fmt: skip
            slices += migs or []
        return _Answer(pynvml.nvmlSystemGetDriverVersion(), tuple(whole), tuple(slices), denied, tuple(unanswered))
    except pynvml.NVMLError as error:
        return f'NVML answers "{_words(pynvml, error)}"'
    finally:
        pynvml.nvmlShutdown()


def nvml_timeout_s(env: Mapping[str, str] = os.environ) -> float:
    """The seconds this process waits for NVML's answer: ``NVML_TIMEOUT_VARIABLE``'s where it is set, else
    NVML_TIMEOUT_S; one line with a HINT where it is no number of seconds above 0."""
    sets = "how long each process waits for NVML's answer"
    return settings.seconds(
        env, NVML_TIMEOUT_VARIABLE, NVML_TIMEOUT_S, sets=sets, example=NVML_TIMEOUT_S, error=ConfigError
    )


@functools.cache
def _nvml() -> _Answer | str | None:
    """NVML's answer (see _ask_nvml), or 'NVML did not answer within N s', asked once per process (the answer
    does not change). The query runs on a daemon thread, left behind where it blocks (inside nvmlInit on a
    GPU fallen off the bus), so that neither the Snakefile's read nor a rank waits on it for ever."""
    answer: list[_Answer | str | BaseException | None] = []

    def ask() -> None:
        try:
            answer.append(_ask_nvml())
        except Exception as error:  # raised in the caller, as it would have been without the thread
            answer.append(error)

    asking = threading.Thread(target=ask, name="snakeddp-nvml", daemon=True)
    timeout = nvml_timeout_s()
    asking.start()
    asking.join(timeout)
    if not answer:
        return f"NVML did not answer within {timeout:g} s"
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0]


def _opens(node: Path) -> bool:
    """Whether this process may open a GPU's device node: absent (a container without it), or refused (EPERM
    from a device cgroup, EACCES), it cannot, as CUDA could not."""
    try:
        os.close(os.open(node, os.O_RDWR | os.O_CLOEXEC))
    except OSError:
        return False
    return True


def driver(driver: Path | None = None, devices: Path | None = None, nvml: bool = True) -> Driver:
    """What the driver shows this process: NVML's answer where it gives one, else /proc's GPUs whose device
    node is there. ``driver``/``devices``/``nvml``: other folders than /proc/driver/nvidia and /dev, NVML
    left unasked (the tests' machines)."""
    host = listed(driver)
    answered = _nvml() if nvml else None
    if isinstance(answered, _Answer):
        found = answered.version, answered.whole, answered.slices, len(host), "nvml"
        return Driver(*found, answered.denied, answered.unanswered)
    if isinstance(answered, str):
        return Driver(_proc_version(driver or DRIVER), listed=len(host), problem=answered)
    nodes = [(gpu, minor and _opens((devices or DEVICES) / f"nvidia{minor}")) for gpu, minor in host]
    reachable = tuple(gpu for gpu, opens in nodes if opens)
    return Driver(_proc_version(driver or DRIVER), reachable, listed=len(host), denied=len(host) - len(reachable))


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
            units = seen.indexed()
            for entry in entries:
                index = _strtoul(entry.strip())
                if not 0 <= index < len(units):
                    break  # a negative entry, or one past the last GPU, ends the list
                if units[index][0] in chosen:
                    return []
                chosen.extend(units[index])
    slices = [gpu for gpu in chosen if gpu.mig]
    return slices[:1] if slices else chosen


def visible(env: Mapping[str, str], driver_dir: Path | None = None) -> list[Gpu]:
    """The GPUs a process started with ``env`` sees, in CUDA's order."""
    return apply_visible(driver(driver_dir), env)


def remedy(seen: Driver) -> str:
    """What to do where NVML fails (``seen.failure()``), for a HINT."""
    if "mismatch" in (seen.failure() or ""):
        return (
            "reboot the machine (or reload the NVIDIA kernel modules): the driver was upgraded and the kernel still "
            "runs the old one"
        )
    return "check the GPUs with nvidia-smi (a GPU fallen off the bus blocks NVML: a reset or a reboot brings it back)"


def driver_version(driver_dir: Path | None = None) -> str | None:
    """The loaded NVIDIA driver's version (570.86.15), or None when none is loaded."""
    return driver(driver_dir).version


def describe(env: Mapping[str, str], driver_dir: Path | None = None, seen: Driver | None = None) -> str:
    """What this machine shows a process, for a message: '1 GPU (NVIDIA A100-SXM4-40GB)', 'no GPU (...)'."""
    seen = seen or driver(driver_dir)
    shown, reachable = apply_visible(seen, env), seen.enumerable()
    setting = f"{VISIBLE}={env[VISIBLE]!r}" if VISIBLE in env else None
    if seen.failure():
        lists = f"; the host's driver lists {seen.listed}" if seen.listed else ""
        return f"no GPU this process can use ({seen.failure()}{lists})"
    if not reachable and (seen.listed or seen.denied):  # NVML's count where /proc lists none (WSL2)
        return (
            f"no GPU this process can reach (the host's driver lists {seen.listed or seen.denied}, and no NVIDIA "
            "library or device reaches them here: a container or job without GPU access)"
        )
    if not reachable:
        return "no GPU (no NVIDIA driver lists one)"
    models = ", ".join(sorted({gpu.model for gpu in shown}))
    if not shown:
        return f"no GPU visible ({len(reachable)} installed, {setting} hides them)"
    if setting is None and len(shown) < len(reachable):
        return f"{len(shown)} GPU ({models}; a process enumerates one MIG slice of the {len(reachable)})"
    hidden = f"; {len(reachable) - len(shown)} more hidden by {setting}" if len(shown) < len(reachable) else ""
    hidden += f"; {seen.denied} more of the host's denied to this process" if seen.denied else ""
    hidden += f"; NVML answers {', '.join(seen.unanswered)}" if seen.unanswered else ""
    return f"{len(shown)} GPU{'s' if len(shown) > 1 else ''} ({models}{hidden})"
