"""A hung run's evidence, taken before its ranks are killed: every rank's Python stack, the flight recorder's
record of its collectives where torch keeps one, and the culprit GPU's state as NVML reports it, written
together under results/runs/<run>/hang/ (the hang's line names stacks.txt).

- A waiting rank's own stack: ``faulthandler.dump_traceback`` from its watch thread (every thread's frames:
  the main thread's in the collective it waits in).
- The culprit's: it may run no line of Python (stopped by SIGSTOP, or stuck in C holding the GIL). When its
  watch starts, every rank registers faulthandler on STACK_SIGNAL into an unlinked temporary file: the
  handler is C, needs no GIL and dumps every thread's frames at once. A rank on the culprit's host sends it
  the signal. A stopped process runs no handler until it is continued, so it also gets SIGCONT, and SIGSTOP
  again once its dump is written: it runs a few milliseconds, the dump shows where it stopped, and the
  launcher kills it as it was found. The text is read through the culprit's own descriptor (/proc/PID/fd:
  the same user, no ptrace). py-spy would read a stopped process's frames without running it, but is not
  installed; a culprit alone on its host, held by a debugger, or in the kernel's uninterruptible wait is
  said not taken, and why.
- Every rank posts its stack (and its flight recorder's dump) to the run's store when it reads the verdict;
  the rank that found the run hung waits for them, at most GATHER_S (the others read the verdict when they
  next judge, every POST_S), and writes the folder whole: a new hang's replaces the last one's.
- The flight recorder: where TORCH_FR_BUFFER_SIZE (or the older TORCH_NCCL_TRACE_BUFFER_SIZE) is over 0,
  torch records every collective of the process group (NCCL's, and gloo's as of torch 2.13). Each waiting
  rank's dump is written as flight-recorder-rank<N>: the pickle torch's analyzer reads
  (``python -m torch.distributed.flight_recorder.fr_trace hang/ --prefix flight-recorder-rank``).
- The GPU: the culprit's, by the UUID its rank posted when its watch started, asked of NVML by the rank that
  takes its stack (each field None where NVML does not tell it). On the CPU: none, and gpu.json says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

# SIGUSR1 and SIGUSR2 mean preemption here (launch.preempt_signals): a real-time signal, which nothing else sends.
STACK_SIGNAL = signal.SIGRTMIN + 3
FLIGHT_SIZES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # torch 2.13 reads the first, then the second
TRAP_PREFIX = "snakeddp-stacks-"
TAKE_S = 2.0  # a signalled dump takes milliseconds; a process that does not run its handler by then will not
NVML_S = 5.0
MIB = 1 << 20


class Trap:
    """This process's stack trap: faulthandler on STACK_SIGNAL, into an unlinked file a rank on this host reads."""

    def __init__(self) -> None:
        fd, path = tempfile.mkstemp(prefix=f"{TRAP_PREFIX}{os.getpid()}-")
        os.unlink(path)  # nothing is left behind, however the process ends (a hung one is killed)
        self.file = os.fdopen(fd, "w+b")
        faulthandler.register(STACK_SIGNAL, file=self.file, all_threads=True)

    def close(self) -> None:
        faulthandler.unregister(STACK_SIGNAL)
        self.file.close()


def own_stack() -> str:
    """Every thread's frames of this process, the calling one included."""
    with tempfile.TemporaryFile() as out:
        faulthandler.dump_traceback(out, all_threads=True)
        out.seek(0)
        return out.read().decode(errors="replace")


def _state(pid: int) -> str | None:
    """/proc/PID/stat's state letter; None where the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return None


def _trap_of(pid: int) -> Path | None:
    """The descriptor of ``pid``'s stack trap, or None where it has none (its watch had not started)."""
    folder = Path(f"/proc/{pid}/fd")
    try:
        for fd in folder.iterdir():
            try:
                if os.path.basename(os.readlink(fd)).startswith(f"{TRAP_PREFIX}{pid}-"):
                    return fd
            except OSError:
                continue
    except OSError:
        return None
    return None


def _dumped(trap: BinaryIO, before: int, seconds: float) -> str | None:
    """What a signalled process wrote into its trap after ``before`` bytes, once it stopped growing. ``trap`` is
    this process's own opening of the file: it outlives the process, should that end right after its dump."""
    deadline, text = time.monotonic() + seconds, ""
    while time.monotonic() < deadline:
        trap.seek(before)
        read = trap.read().decode(errors="replace")
        if read and read == text:
            return text
        text = read
        time.sleep(0.02)
    return text or None


def _signal_main_thread(pid: int, signum: int) -> None:
    """``signum`` to ``pid``'s main thread (its id is the pid's), not to whichever thread the kernel picks: a
    continued process's threads all run at once, and a thread-directed signal is handled before that thread runs
    another instruction of its own, so its frames are dumped where it stopped (glibc's tgkill; else os.kill)."""
    tgkill = getattr(ctypes.CDLL(None, use_errno=True), "tgkill", None)
    if tgkill is None:
        os.kill(pid, signum)
    elif tgkill(pid, pid, signum) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))  # ESRCH is ProcessLookupError, EPERM PermissionError


def take_stack(pid: int, seconds: float = TAKE_S) -> tuple[str | None, str]:
    """Another process's stack, by its trap: the text and how it was taken, or None and why not."""
    state = _state(pid)
    if state is None:
        return None, "its process is gone"
    if state in "ZX":
        return None, "its process has exited"
    if state == "t":
        return None, "a debugger holds its process (it runs no signal handler until the debugger lets it go)"
    trap = _trap_of(pid)
    if trap is None:
        return None, "its process has no stack trap (it stopped before its watch started)"
    try:
        with open(trap, "rb") as opened:
            before = opened.seek(0, os.SEEK_END)
            _signal_main_thread(pid, STACK_SIGNAL)
            if state == "T":
                os.kill(pid, signal.SIGCONT)  # a stopped process runs its handler only once continued
            text = _dumped(opened, before, seconds)
    except ProcessLookupError:
        return None, "its process is gone (the signal found none)"
    except FileNotFoundError:
        return None, "its process is gone (its stack trap with it)"
    except PermissionError:
        return None, "its process is not this user's"
    finally:
        if state == "T":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)  # as it was found, where it is still there
    if text is None:
        waits = " (it waits in the kernel: a device or a file system)" if state == "D" else ""
        return None, f"its process did not dump its stack within {seconds:g} s of the signal{waits}"
    how = "stopped: continued for the dump, and stopped again" if state == "T" else "signalled"
    return text, f"taken by signal ({how})"


def flight_record() -> bytes | None:
    """This rank's flight recorder dump, where torch keeps one (a buffer size over 0); else None."""
    sizes = [os.environ.get(name, "").strip() for name in FLIGHT_SIZES]
    size = next((s for s in sizes if s), "0")
    if not size.isdigit() or int(size) == 0:
        return None
    try:
        from torch._C._distributed_c10d import _dump_fr_trace

        return _dump_fr_trace()
    except Exception:  # a build without it, or nothing recorded: the stacks are still worth keeping
        return None


def device_of(trainer: Any) -> str:
    """The NVML UUID of the GPU this rank trains on, or ``cpu``."""
    try:
        device = trainer.strategy.root_device
        if device.type != "cuda":
            return "cpu"
        import torch

        return f"GPU-{torch.cuda.get_device_properties(device).uuid}"
    except Exception:  # before the strategy knows its device, or a driver that does not answer
        return "unknown"


def _field(ask: Callable[[], Any]) -> Any:
    try:
        return ask()
    except Exception:  # NVML's Not Supported, or a function this driver lacks: not known
        return None


def _ask_gpu(uuid: str) -> dict[str, Any]:
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        memory = _field(lambda: pynvml.nvmlDeviceGetMemoryInfo(h))
        rates = _field(lambda: pynvml.nvmlDeviceGetUtilizationRates(h))
        processes = _field(lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h)) or []
        return {
            "name": _field(lambda: pynvml.nvmlDeviceGetName(h)),
            "uuid": uuid,
            "performance_state": _field(lambda: pynvml.nvmlDeviceGetPerformanceState(h)),
            "utilization_gpu_percent": getattr(rates, "gpu", None),
            "utilization_memory_percent": getattr(rates, "memory", None),
            "memory_used_mib": memory.used // MIB if memory else None,
            "memory_total_mib": memory.total // MIB if memory else None,
            "temperature_c": _field(lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
            "power_w": _field(lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000),
            "clocks_event_reasons": _field(lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)),
            "processes": [
                {"pid": p.pid, "used_mib": (p.usedGpuMemory // MIB) if p.usedGpuMemory else None} for p in processes
            ],
        }
    finally:
        pynvml.nvmlShutdown()


def gpu_state(device: str, rank: int) -> dict[str, Any]:
    """What NVML says of ``rank``'s GPU now (at most NVML_S: a GPU fallen off the bus blocks NVML)."""
    if not device.startswith("GPU-"):
        why = "it trains on the CPU" if device == "cpu" else "its GPU was not known when its watch started"
        return {"rank": rank, "device": device, "state": None, "why": why}
    answer: list[Any] = []

    def ask() -> None:
        try:
            answer.append(_ask_gpu(device))
        except Exception as error:  # no nvidia-ml-py, or NVML's error: said in the record
            answer.append(f"NVML answers {error!r}")

    asking = threading.Thread(target=ask, name="snakeddp-nvml-state", daemon=True)
    asking.start()
    asking.join(NVML_S)
    found = answer[0] if answer else f"NVML did not answer within {NVML_S:g} s"
    if isinstance(found, str):
        return {"rank": rank, "device": device, "state": None, "why": found}
    return {"rank": rank, "device": device, "state": found, "why": None}
