"""Every rank watches its own progress, and the rank that finds the run hung says whom it waits for.

A thread in each rank (of a run of more than one) samples where its trainer is every TICK_S: the
optimizer step, the batches started, the epoch and the hook or step it runs (compat.lightning's
``fit_position``: attribute reads, nothing the training loop does or pays for), and posts that to
the run's store every POST_S seconds (snakeddp.cluster.hang). The training loop itself does nothing
more per step: no collective, no file.

A rank that has not advanced for launch.hang_timeout's shortest limit is waiting (or stuck): it reads
every rank's post and ``judge``s. When the rank that stopped advancing first has been still for its
limit, the first rank to say so (the store's compare-and-set elects it) writes the one line (the
launcher's failure file, or stderr) and hung.json, and every waiting rank exits with HUNG_EXIT_CODE,
on which launchers stop the rest at once: the stopped rank is killed with them, and the last
checkpoint stays as it was. Where the store itself does not answer, its host (rank 0, or torchrun's
agent) is the one the others wait for.
"""

from __future__ import annotations

import collections
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import lightning.pytorch as pl

from snakeddp.cluster import pace
from snakeddp.cluster.base import Layout
from snakeddp.cluster.hang import (
    FINISHED,
    POST_S,
    SAVING,
    TICK_S,
    HangTimeout,
    Position,
    Stall,
    judge,
    lines_of,
    record,
    step_time,
)
from snakeddp.cluster.lifecycle import HUNG_EXIT_CODE
from snakeddp.compat.lightning import fit_position
from snakeddp.errors import HangError, one_line, print_line, write_first
from snakeddp.run import ledger
from snakeddp.run.layout import RUNS
from snakeddp.run.tries import newest_checkpoint, write_hang
from snakeddp.training.evidence import device_of
from snakeddp.training.gather import Gathering, Verdict
from snakeddp.training.meeting import CALL_S, PROG, Meeting, StoreGone, bounded, progress_key
from snakeddp.training.owntime import OwnTime
from snakeddp.util.terminal import say

HUNG_KEY = "snakeddp/hung"
# /proc/PID/stat's state, for the rank the others wait for when it runs on this host.
PROCESS_STATES = {
    "T": "its process is stopped (SIGSTOP or a debugger)",
    "t": "its process is stopped by a debugger",
    "D": "its process waits in the kernel (a device or a file system)",
    "Z": "its process has exited",
}


def process_state(position: Position) -> str | None:
    """What this host's kernel says of the process, when it runs here."""
    if position.host != socket.gethostname():
        return None
    try:
        stat = Path(f"/proc/{position.pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return "its process is gone"
    return PROCESS_STATES.get(stat.rsplit(")", 1)[-1].split()[0])


def _device(trainer: pl.Trainer) -> str:
    """What this rank trains on, as its strategy says (cpu, cuda:1), with a GPU's NVML UUID where the driver tells
    it (cuda:1 GPU-8a6f...: cuda:1 is an index into CUDA_VISIBLE_DEVICES, the UUID what nvidia-smi -i takes)."""
    try:
        device = str(trainer.strategy.root_device)
    except (AttributeError, RuntimeError, IndexError):  # a strategy that has no device before fit
        return "cpu"
    uuid = device_of(trainer) if device.startswith("cuda") else ""
    return f"{device} {uuid}" if uuid.startswith("GPU-") else device


def readable(values: list[bytes]) -> list[Position]:
    """The posts that are a rank's position (a store anyone on the network can write to holds anything)."""
    positions = []
    for value in values:
        try:
            positions.append(Position.from_json(value))
        except (ValueError, TypeError):
            continue
    return positions


class Watch:
    """One rank's watch over the run's progress; ``start`` after the meeting, ``stop`` when its fit ends."""

    def __init__(
        self,
        meeting: Meeting,
        layout: Layout,
        timeout: HangTimeout,
        trainer: pl.Trainer,
        run_id: str,
        run_dir: Path,
        failure_file: Path | None,
        node: str | None,
        saving: Callable[[], bool] = lambda: False,
        straggler: pace.Straggler | None = None,
    ) -> None:
        self.meeting, self.layout, self.timeout, self.trainer = meeting, layout, timeout, trainer
        self.run_id, self.run_dir, self.failure_file, self.node, self.saving = (
            run_id, run_dir, failure_file, node, saving,
        )  # fmt: skip
        self.store = meeting.store
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.keys = [progress_key(rank) for rank in range(layout.world_size)]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="snakeddp-watch", daemon=True)
        self._sample: tuple[int, int, int, str | None] | None = None
        self._advanced_at = self._posted_at = time.time()
        self._step_at: tuple[int, float] = (0, self._advanced_at)
        self._step_s: collections.deque[float] = collections.deque(maxlen=64)
        self._store_gone = False
        self._judged_at = 0.0
        self.gathering = Gathering(self._call, self.store, layout.rank, meeting.ranks, run_id, run_dir)
        # Each rank times its own steps; rank 0 scores everyone's (snakeddp.cluster.pace).
        self.own_time = OwnTime()
        trainer.callbacks.insert(0, self.own_time)  # first: the hooks after its step's end are not its own time
        self.device = _device(trainer)
        self.straggler = straggler
        on = straggler is not None and straggler.on and layout.rank == 0
        self.paces = pace.Paces(straggler) if on and straggler is not None else None
        self._paced_at = 0.0

    def start(self) -> None:
        # The meeting waited long; a read of a live store takes milliseconds.
        self.store.set_timeout(timedelta(seconds=CALL_S))
        self.gathering.start(device_of(self.trainer))
        self._thread.start()

    def stop(self, finished: bool) -> None:
        """This rank's fit is over (``finished``: it completed, so nobody waits for it any more); again: nothing."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._thread.join(timeout=2 * CALL_S)  # a daemon: one stuck on a gone store is left behind
        self.gathering.close()
        if finished:
            try:
                self._post(time.time(), FINISHED)
            except StoreGone:
                pass  # the store's host finished first

    def _call(self, operation: Callable[[], Any]) -> Any:
        """A store operation, bounded (meeting.bounded); after one that fails, the store is taken for gone."""
        if self._store_gone:
            raise StoreGone
        try:
            return bounded(operation, CALL_S)
        except StoreGone:
            self._store_gone = True
            raise

    # The thread.

    def _run(self) -> None:
        while not self._stopped.wait(TICK_S):
            self._tick(time.time())

    def _tick(self, now: float) -> None:
        sample = self._where()
        if sample != self._sample:
            if self._sample is None:  # the first step it sees (a resumed fit starts where it left off)
                self._step_at = (sample[0], now)
            elif sample[0] > self._step_at[0]:
                steps, since = sample[0] - self._step_at[0], now - self._step_at[1]
                self._step_s.append(since / steps)
                self._step_at = (sample[0], now)
            self._sample, self._advanced_at = sample, now
        if now - self._posted_at >= POST_S and not self._store_gone:
            try:
                self._post(now)
            except StoreGone:
                pass  # judged below, once this rank has been still long enough
        if self.paces is not None and now - self._paced_at >= POST_S and not self._store_gone:
            self._paced_at = now
            self._pace(now)
        # Still for as long as any hang takes: read everyone's posts, as often as they post (every waiting
        # rank reads them all, so not more often).
        if now - self._advanced_at >= self.timeout.shortest_s and now - self._judged_at >= POST_S:
            self._judged_at = now
            self._judge(now)

    def _where(self) -> tuple[int, int, int, str | None]:
        try:
            return fit_position(self.trainer)
        except (AttributeError, TypeError):  # the trainer between two of its stages
            return self._sample or (0, 0, 0, None)

    def position(self, now: float, phase: str | None = None) -> Position:
        step, _, epoch, hook = self._sample or (0, 0, 0, None)
        if phase is None:
            phase = SAVING if self.saving() else hook or "between steps"
        own_steps, own_s = self.own_time.totals
        step_s = step_time(self._step_s, own_steps, own_s)
        return Position(
            rank=self.layout.rank,
            host=self.host,
            pid=self.pid,
            node=self.node,
            step=step,
            epoch=epoch,
            phase=phase,
            step_s=step_s,
            advanced_at=self._advanced_at,
            posted_at=now,
            device=self.device,
            own_steps=own_steps,
            own_s=round(own_s, 6),
        )

    def _post(self, now: float, phase: str | None = None) -> None:
        text = self.position(now, phase).to_json()
        self._call(lambda: self.store.set(progress_key(self.layout.rank), text))
        self._posted_at = now

    def _judge(self, now: float) -> None:
        try:
            if self._call(lambda: self.store.check([HUNG_KEY])):
                self._heard(self._call(lambda: self.store.get(HUNG_KEY)))  # another rank said it
            values = self._call(lambda: self.store.multi_get(self.keys))
        except StoreGone:
            self._no_store(now)
            return
        stall = judge(readable(values), now, self.timeout)
        if stall is not None:
            self._announce(stall)

    def _pace(self, now: float) -> None:
        """Rank 0: score every rank's own pace from their posts (snakeddp.cluster.pace); name a rank that has been
        slow for the window, once a spell, and the run goes on; with launch.straggler: stop, end it as a hang."""
        try:
            values = self._call(lambda: self.store.multi_get(self.keys))
        except StoreGone:
            return  # a hang's, judged once this rank has been still long enough
        if self.paces is None or self.straggler is None:
            return
        positions = {p.rank: p for p in readable(values)}
        for slow in self.paces.update(positions.values(), now):
            if self.straggler.action == pace.STOP:
                self._stop_for(slow, positions)  # ends this process (its try's hang is the ledger's event)
            say(f"{PROG}: {pace.line(slow, self.run_id, self._remember(slow))}")

    def _remember(self, slow: pace.Slow) -> str | None:
        """The slow rank's node's slow spell in the checkout's ledger of nodes (snakeddp.run.ledger), where this is a
        workflow's run directory (results/runs/<run>); the ledger's path, or None where it was not kept."""
        if self.run_dir.parent.name != RUNS:
            return None
        results = self.run_dir.parent.parent
        note = f"rank {slow.rank.rank} at {slow.relative:.2f}x the fastest rank's pace for {slow.slow_s:.0f} s"
        try:
            ledger.record(results, slow.rank.node or slow.rank.host, "slow", self.run_id, slow.since, note)
        except (ledger.LedgerError, OSError):  # a ledger that cannot be read: the line is said all the same
            return None
        return str(ledger.path(results))

    def _stop_for(self, slow: pace.Slow, positions: dict[int, Position]) -> None:
        """End the run as a hang ends it, with hung.json naming the slow rank (kind slow)."""
        me = str(self.layout.rank)
        try:
            said = self._call(lambda: self.store.compare_set(HUNG_KEY, "", me))
        except StoreGone:
            said = me.encode()
        if said != me.encode():
            self._heard(said)  # another rank found the run hung first: its line, with this rank's evidence
        culprit = positions[slow.rank.rank]
        text = pace.stop_line(slow, self.run_id, self._checkpoint())
        reached = max(p.step for p in positions.values())
        self._say(text, pace.record(slow, self._line(text), culprit.step, culprit.epoch, culprit.phase, reached))

    def scores(self) -> dict[int, dict[str, Any]]:
        """Each rank's pace scores (rank 0's watch; empty elsewhere, or with launch.straggler: null)."""
        return self.paces.scores() if self.paces is not None else {}

    def _announce(self, stall: Stall) -> None:
        state = process_state(stall.culprit)  # before its stack is taken: a stopped process runs for that
        verdict = Verdict(self.layout.rank, stall.culprit.rank, stall.silent)
        mine = verdict.text()
        try:
            said = self._call(lambda: self.store.compare_set(HUNG_KEY, "", mine))
        except StoreGone:
            said = mine.encode()
        if said != mine.encode():
            self._heard(said)
        evidence = self._evidence(verdict)
        line = lines_of(stall, self.run_id, self._checkpoint(), lambda _: state, evidence)
        self._say(line, record(stall, self._line(line)))

    def _evidence(self, verdict: Verdict) -> str | None:
        """This rank's part of the hang's evidence, then everyone's written under the run directory: the stacks
        file the line names (None where the store or the disk failed: the line is said without it)."""
        try:
            self.gathering.give(verdict)
            return str(self.gathering.write(verdict))
        except (StoreGone, OSError):
            return None

    def _heard(self, value: bytes) -> NoReturn:
        """Another rank found the run hung: give it this rank's evidence, wait until it has said so, and exit."""
        verdict = Verdict.read(value)
        if verdict is not None:
            try:
                self.gathering.give(verdict)
                self.gathering.wait_done()
            except StoreGone:
                pass  # its host is gone: nobody is left to write it
        self._exit()

    def _no_store(self, now: float) -> None:
        """The store does not answer: its host stopped. Said once this rank has been still for its limit."""
        mine = self.position(now)
        if now - self._advanced_at < self.timeout.limit(mine):
            return
        host = self.meeting.ranks[0]
        culprit = Position(0, host["host"], host["pid"], host["node"], -1, -1, "unknown", None, 0.0, 0.0)
        state = process_state(culprit)
        line = (
            f"run {self.run_id} hung: the run's store at {self.meeting.address}:{self.meeting.port}, held by rank 0 "
            f"on {culprit.where()} (pid {culprit.pid}), stopped answering{f' ({state})' if state else ''}, and rank "
            f"{mine.rank} on {mine.where()} has not "
            f"advanced for {now - self._advanced_at:.0f} s at step {mine.step} (in {mine.doing()}). HINT: the ranks "
            f"were stopped and the last checkpoint is kept ({self._checkpoint()}): rerun to resume from it."
        )
        kept = {
            "kind": "stopped",
            "culprit": {"rank": 0, "host": host["host"], "node": host["node"], "pid": host["pid"], "step": None,
                        "epoch": None, "phase": None},
            "stalled_s": round(now - self._advanced_at, 1),
            "limit_s": self.timeout.limit(mine),
            "reached_step": mine.step,
            "line": self._line(line),
        }  # fmt: skip
        # No store to elect one rank by: every waiting rank says it, the first file written stays.
        self._say(line, kept, speak=self.failure_file is not None or self.layout.rank == 1)

    def _checkpoint(self) -> str:
        newest = newest_checkpoint(self.run_dir)
        return str(newest) if newest is not None else "none yet: the rerun starts over"

    @staticmethod
    def _line(message: str) -> str:
        return one_line(PROG, HangError(message))

    def _say(self, message: str, kept: dict[str, Any], speak: bool = True) -> None:
        line = self._line(message)
        write_hang(self.run_dir, kept)
        if self.failure_file is not None:
            write_first(self.failure_file, line)
        elif speak:
            print_line(line)
        if not self._store_gone:
            try:
                self.gathering.done()
            except StoreGone:
                pass
        self._exit()

    @staticmethod
    def _exit() -> NoReturn:
        """The process ends here, whatever its main thread waits in: a collective nobody will finish."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(HUNG_EXIT_CODE)
