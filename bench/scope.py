"""A benchmarked command in a memory-limited scope whose CPU time and memory are sampled while it runs.

On this machine (cgroup v1, root) the scope is a memory group with the limit and a cpuacct group; where the
memory controller is cgroup v2's (``/sys/fs/cgroup/cgroup.controllers`` lists it), one v2 group does both
(``memory.max``, ``memory.peak``, ``memory.events``' ``max``, ``cpu.stat``). Either way the command's shell
joins the group before it ``exec``s, so every process the command starts is in it, page cache included (a
file's pages are charged to the group that read or wrote them).

What comes back: the peak (``memory.max_usage_in_bytes`` / ``memory.peak``), how many times the group hit
its limit (v1's ``memory.failcnt``; v2's ``max`` events), and a sample every ``INTERVAL_S`` of the group's CPU
seconds, so a phase's CPU is read between two times (``cpu_between``). Where neither is writable, the command
runs as it is, unlimited, and the CPU is the children's rusage of the whole command alone.
"""

from __future__ import annotations

import bisect
import os
import shlex
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
INTERVAL_S = 0.1
# How long the group's last processes (a warm process ending after snakemake) are waited for before rmdir.
EMPTY_WAIT_S = 30.0


def _v2_root() -> Path | None:
    """The cgroup v2 hierarchy where it holds the memory controller (a unified or hybrid mount)."""
    for root in (ROOT, ROOT / "unified"):
        controllers = root / "cgroup.controllers"
        if controllers.is_file() and "memory" in controllers.read_text().split() and os.access(root, os.W_OK):
            return root
    return None


class Scope:
    """One command's cgroup scope (``kind``: "v1", "v2" or None where none could be made)."""

    def __init__(self, name: str, limit_mb: int | None) -> None:
        self.limit_mb = limit_mb
        self.samples: list[tuple[float, float, int]] = []  # (perf_counter, CPU seconds, bytes in use)
        self.groups: list[Path] = []
        self.kind: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if limit_mb is None:
            return
        if os.access(ROOT / "memory", os.W_OK) and os.access(ROOT / "cpuacct", os.W_OK):
            self.kind = "v1"
            self.groups = [ROOT / "memory" / name, ROOT / "cpuacct" / name]
            for group in self.groups:
                group.mkdir(exist_ok=True)
            (self.groups[0] / "memory.limit_in_bytes").write_text(str(limit_mb << 20))
        elif (root := _v2_root()) is not None:
            self.kind = "v2"
            self.groups = [root / name]
            self.groups[0].mkdir(exist_ok=True)
            (self.groups[0] / "memory.max").write_text(str(limit_mb << 20))

    def wrap(self, command: Sequence[str]) -> list[str]:
        """``command`` started inside the scope's groups."""
        if not self.groups:
            return list(command)
        joins = " && ".join(f"echo $$ > {group}/cgroup.procs" for group in self.groups)
        return ["sh", "-c", f"{joins} && exec {shlex.join(command)}"]

    def __enter__(self) -> Scope:
        if self.groups:
            self._thread = threading.Thread(target=self._sample_until_stopped, name="bench-scope", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.close()

    def _sample_until_stopped(self) -> None:
        while True:
            self.samples.append((time.perf_counter(), self.cpu_s(), self.usage()))
            if self._stop.wait(INTERVAL_S):
                self.samples.append((time.perf_counter(), self.cpu_s(), self.usage()))
                return

    def cpu_s(self) -> float:
        """The group's CPU seconds so far (every process that was ever in it)."""
        if self.kind == "v1":
            return int((self.groups[1] / "cpuacct.usage").read_text()) / 1e9
        stat = dict(line.split() for line in (self.groups[0] / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6

    def usage(self) -> int:
        if self.kind == "v1":
            return int((self.groups[0] / "memory.usage_in_bytes").read_text())
        return int((self.groups[0] / "memory.current").read_text())

    def memory(self) -> dict[str, float]:
        """The group's peak (MB, page cache included) and how many times it met its limit."""
        if self.kind == "v1":
            return {
                "peak_mb": int((self.groups[0] / "memory.max_usage_in_bytes").read_text()) / 1e6,
                "failcnt": int((self.groups[0] / "memory.failcnt").read_text()),
            }
        if self.kind == "v2":
            events = dict(line.split() for line in (self.groups[0] / "memory.events").read_text().splitlines())
            return {
                "peak_mb": int((self.groups[0] / "memory.peak").read_text()) / 1e6,
                "failcnt": int(events["max"]),
            }
        return {}

    def cpu_between(self, start: float, stop: float) -> float | None:
        """The group's CPU seconds between two perf_counter times (linear between samples)."""
        if len(self.samples) < 2:
            return None
        return round(self._cpu_at(stop) - self._cpu_at(start), 2)

    def _cpu_at(self, at: float) -> float:
        times = [s[0] for s in self.samples]
        i = bisect.bisect_left(times, at)
        if i <= 0:
            return self.samples[0][1]
        if i >= len(times):
            return self.samples[-1][1]
        (t0, c0, _), (t1, c1, _) = self.samples[i - 1], self.samples[i]
        return c0 + (c1 - c0) * (at - t0) / (t1 - t0) if t1 > t0 else c1

    def close(self) -> None:
        """Remove the groups once their processes are gone (a warm process may outlive snakemake briefly)."""
        deadline = time.monotonic() + EMPTY_WAIT_S
        for group in self.groups:
            while (group / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
                time.sleep(0.2)
            try:
                group.rmdir()
            except OSError:
                pass  # still busy: left for the kernel to hold, named by the benchmark's pid
        self.groups = []
