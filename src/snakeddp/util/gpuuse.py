"""What other work holds this machine's GPUs, as the driver's NVML answers it (nvidia-smi asks the same):
each GPU's compute processes with the memory they hold (nvmlDeviceGetComputeRunningProcesses), its memory
in use (nvmlDeviceGetMemoryInfo) and its compute mode (nvmlDeviceGetComputeMode: under EXCLUSIVE_PROCESS CUDA
gives a second process no context, under PROHIBITED none at all). Nothing here initialises CUDA.

Processes in another PID namespace (another container on the same GPU) may be missing from the list, or
carry pids this process cannot see; their memory is still in the GPU's memory in use.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# nvmlComputeMode_t's values (nvml.h) that keep a second process off a GPU.
PROHIBITED, EXCLUSIVE_PROCESS = 2, 3
# An idle GPU shows some memory in use without any process: the driver's reservation (a few hundred MiB on
# an A100 or H100) and a desktop's graphics. More than this, with no compute process this one can see, is
# another container's work.
IDLE_BYTES = 1 << 30


@dataclass(frozen=True)
class Use:
    """One GPU's use by other processes, as NVML answered."""

    #: (pid, bytes of GPU memory it holds; 0 where NVML does not say) for each compute process but this one.
    processes: tuple[tuple[int, int], ...]
    used: int
    total: int
    mode: int = 0

    def busy(self) -> str | None:
        """Why a run should not take this GPU ('pid 4242 holds 78 of 80 GiB'), or None where it is free."""
        memory = f"{gib(self.used)} of {gib(self.total)} GiB"
        pids = ", ".join(str(pid) for pid, _ in self.processes)
        if self.mode == PROHIBITED:
            return "its compute mode is PROHIBITED: no process may use it"
        if self.processes and self.mode == EXCLUSIVE_PROCESS:
            return f"EXCLUSIVE_PROCESS mode, and pid {pids} holds it ({memory})"
        if len(self.processes) > 1:
            return f"pids {pids} hold {memory}"
        if self.processes:
            return f"pid {pids} holds {memory}"
        if self.used > max(IDLE_BYTES, self.total // 20):
            return f"{memory} in use by processes this one cannot see (another container's)"
        return None


#: A GPU no other process uses, as far as NVML tells.
FREE = Use((), 0, 0)


def gib(size: int) -> str:
    """Bytes as GiB for a message: whole above 10 (78), one decimal below (1.5)."""
    value = size / (1 << 30)
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}".replace(".0", "")


@contextlib.contextmanager
def asking() -> Iterator[Callable[[str], Use]]:
    """A function that tells a GPU's (or MIG slice's) use by its UUID, NVML initialised once while it is used;
    a GPU NVML does not answer for, or every GPU where there is no NVML, is told as FREE (a fallback to /proc
    knows of no processes)."""
    try:
        import pynvml
    except ImportError:
        yield lambda uuid: FREE
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        yield lambda uuid: FREE
        return
    try:
        yield lambda uuid: _use(pynvml, uuid) or FREE
    finally:
        pynvml.nvmlShutdown()


def _use(pynvml, uuid: str) -> Use | None:
    try:
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except pynvml.NVMLError:
        return None
    try:
        mode = pynvml.nvmlDeviceGetComputeMode(handle)
    except pynvml.NVMLError:
        mode = 0  # a MIG slice answers Not Supported: its parent's mode is what CUDA meets
    ours = os.getpid()
    others = tuple((p.pid, p.usedGpuMemory or 0) for p in running if p.pid != ours)
    return Use(others, memory.used, memory.total, mode)
