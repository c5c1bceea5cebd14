"""How a hung run's evidence reaches one folder: every rank that reads the verdict posts what it took
(snakeddp.training.evidence) to the run's store, and the rank that found the run hung writes it all under
results/runs/<run>/hang/try-<n>/ (run.layout's hang_of: a folder per hung try) before it says the line; the
others wait for that (at most GATHER_S), then exit.

The store carries it, not the file system: a rank on another node may not share the run directory's disk.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from snakeddp.cluster.hang import POST_S, TICK_S
from snakeddp.errors import RunStateError
from snakeddp.run import tries
from snakeddp.run.layout import HANG_STACKS, RunPaths
from snakeddp.training.evidence import TAKE_S, Trap, flight_record, gpu_state, own_stack, take_stack
from snakeddp.training.meeting import StoreGone

GPU = "gpu.json"
FLIGHT = "flight-recorder-rank{rank}"
# The others read the verdict when they next judge (every POST_S, a tick late), then one may take the culprit's.
GATHER_S = POST_S + TICK_S + TAKE_S + 2.0
KEYS = "snakeddp/evidence/"
DEVICE_KEY = KEYS + "device/{rank}"
STACK_KEY = KEYS + "stack/{rank}"
FLIGHT_KEY = KEYS + "flight/{rank}"
GPU_KEY = KEYS + "gpu"
DONE_KEY = KEYS + "done"
POLL_S = 0.1


@dataclass(frozen=True)
class Verdict:
    """What the rank that found the run hung stores for the others: itself, whom they waited for, and whether that
    rank stopped answering (then a rank on its host takes its stack by signal)."""

    judge: int
    culprit: int
    silent: bool

    def text(self) -> str:
        return json.dumps({"judge": self.judge, "culprit": self.culprit, "silent": self.silent})

    @classmethod
    def read(cls, value: bytes) -> Verdict | None:
        """A verdict another rank stored; None where the value is not one (anyone on the network may write)."""
        try:
            raw = json.loads(value)
            return cls(int(raw["judge"]), int(raw["culprit"]), bool(raw["silent"]))
        except (ValueError, TypeError, KeyError):
            return None


def folder(run_dir: Path) -> Path:
    """Where this try's evidence goes: hang/try-<n>/, n the number tries.json will give the try (its launcher
    appends it once the ranks are gone). Where no launcher keeps tries in this directory (AzureML's ranks start
    without one) or they cannot be read, the next number no folder holds: an earlier hang's is never replaced."""
    paths = RunPaths(run_dir)
    try:
        number = len(tries.read(run_dir)) + 1
    except RunStateError:  # the launcher says so when it appends; the evidence is kept all the same
        number = 1
    while paths.hang_of(number).exists():
        number += 1
    return paths.hang_of(number)


class Gathering:
    """One rank's part in keeping a hang's evidence. ``call`` is its watch's bounded store call (StoreGone)."""

    def __init__(self, call: Callable[[Callable[[], Any]], Any], store: Any, rank: int,
                 ranks: list[dict[str, Any]], run_id: str, run_dir: Path) -> None:  # fmt: skip
        self.call, self.store, self.rank, self.ranks = call, store, rank, ranks
        self.run_id, self.run_dir = run_id, run_dir
        self.trap: Trap | None = None

    def start(self, device: str) -> None:
        """Set the stack trap and say which GPU this rank trains on (read if it is the one the others wait for)."""
        self.trap = Trap()
        try:
            self.call(lambda: self.store.set(DEVICE_KEY.format(rank=self.rank), device))
        except StoreGone:
            pass  # the watch finds the store gone itself

    def close(self) -> None:
        if self.trap is not None:
            self.trap.close()
            self.trap = None

    def _set(self, key: str, value: str | bytes) -> None:
        self.call(lambda: self.store.set(key, value))

    def _has(self, key: str) -> bool:
        return bool(self.call(lambda: self.store.check([key])))

    def give(self, verdict: Verdict) -> None:
        """Post this rank's stack and flight record; on the culprit's host, its stack and its GPU's state too."""
        self._set(STACK_KEY.format(rank=self.rank), json.dumps({"stack": own_stack(), "how": "by its own watch"}))
        record = flight_record()
        if record is not None:
            self._set(FLIGHT_KEY.format(rank=self.rank), record)
        if self.rank != self.reader(verdict):
            return
        culprit = self.ranks[verdict.culprit]
        if verdict.silent:
            stack, how = take_stack(int(culprit["pid"]))
            self._set(STACK_KEY.format(rank=verdict.culprit), json.dumps({"stack": stack, "how": how}))
        key = DEVICE_KEY.format(rank=verdict.culprit)
        device = self.call(lambda: self.store.get(key)).decode() if self._has(key) else "unknown"
        self._set(GPU_KEY, json.dumps(gpu_state(device, verdict.culprit)))

    def reader(self, verdict: Verdict) -> int | None:
        """The rank that reads the culprit: itself while it answers, else the lowest other rank on its host."""
        if not verdict.silent:
            return verdict.culprit
        host = self.ranks[verdict.culprit]["host"]
        mates = [r for r, where in enumerate(self.ranks) if where["host"] == host and r != verdict.culprit]
        return min(mates) if mates else None

    def write(self, verdict: Verdict) -> Path:
        """Wait for every rank's post (at most GATHER_S) and write the folder whole; its stacks file."""
        wanted = [STACK_KEY.format(rank=r) for r in range(len(self.ranks))] + [GPU_KEY]
        deadline = time.monotonic() + GATHER_S
        while time.monotonic() < deadline and not self.call(lambda: self.store.check(wanted)):
            time.sleep(POLL_S)
        posted = {key: self.call(lambda key=key: self.store.get(key)) for key in wanted if self._has(key)}
        flights = {}
        for rank in range(len(self.ranks)):
            key = FLIGHT_KEY.format(rank=rank)
            if self._has(key):
                flights[FLIGHT.format(rank=rank)] = self.call(lambda key=key: self.store.get(key))
        files: dict[str, bytes] = {HANG_STACKS: self._stacks(verdict, posted).encode(), **flights}
        files[GPU] = posted.get(GPU_KEY) or json.dumps(self._gpu_not_read(verdict)).encode()
        return _replace(folder(self.run_dir), files) / HANG_STACKS

    def _stacks(self, verdict: Verdict, posted: dict[str, bytes]) -> str:
        at = datetime.now(UTC).isoformat(timespec="seconds")
        parts = [
            f"Python stacks of run {self.run_id}'s {len(self.ranks)} ranks, taken {at} when rank {verdict.judge} "
            f"found the run hung; the others waited for rank {verdict.culprit}. Each thread's frames, most recent "
            "call first (Python's faulthandler).\n"
        ]
        for rank, where in enumerate(self.ranks):
            value = posted.get(STACK_KEY.format(rank=rank))
            taken = _post(value)
            who = ", the one the others waited for" if rank == verdict.culprit else ""
            head = f"== rank {rank} on {where['host']} (pid {where['pid']}){who}"
            if taken.get("stack"):
                parts.append(f"{head}: {taken['how']} ==\n{taken['stack'].rstrip()}\n")
            else:
                parts.append(f"{head}: not taken: {taken.get('how') or self._why_not(rank, verdict)} ==\n")
        return "\n".join(parts)

    def _why_not(self, rank: int, verdict: Verdict) -> str:
        if rank == verdict.culprit and verdict.silent and self.reader(verdict) is None:
            host = self.ranks[rank]["host"]
            return f"its process stopped answering on host {host}, where no other rank of the run runs to signal it"
        return f"it did not post its stack within {GATHER_S:g} s of the verdict"

    def _gpu_not_read(self, verdict: Verdict) -> dict[str, Any]:
        why = (
            f"not read: no rank of the run runs on rank {verdict.culprit}'s host to ask NVML"
            if self.reader(verdict) is None
            else f"not read: its host's rank did not post it within {GATHER_S:g} s"
        )
        return {"rank": verdict.culprit, "device": None, "state": None, "why": why}

    def done(self) -> None:
        """The line is said: the others may exit."""
        self._set(DONE_KEY, "1")

    def wait_done(self) -> None:
        """Until the rank that found the run hung has written the evidence and said the line (at most GATHER_S and
        a margin): a rank that exits first has the launcher kill it before it could."""
        deadline = time.monotonic() + GATHER_S + TAKE_S + 2.0
        while time.monotonic() < deadline and not self._has(DONE_KEY):
            time.sleep(POLL_S)


def _post(value: bytes | None) -> dict[str, Any]:
    try:
        taken = json.loads(value) if value else {}
    except ValueError:
        return {}
    return taken if isinstance(taken, dict) else {}


def _replace(target: Path, files: dict[str, bytes]) -> Path:
    """The folder holding ``files`` and nothing else, never seen half-written (in place of one left there)."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        for name, data in files.items():
            (partial / name).write_bytes(data)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)  # a full disk leaves no half of it
        raise
    old = target.with_name(f".{target.name}.{os.getpid()}.old")
    if target.exists():
        target.rename(old)
    partial.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target
