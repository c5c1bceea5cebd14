"""How long a run's ranks may wait on each other (``launch.hang_timeout``), and whom a stopped run waits for.

Read here and nowhere else: the launcher takes the rendezvous' bound from it (torchrun's join timeout,
NCCL's variables), every rank its meeting's bound, its process group's timeout and its watch's limits
(snakeddp.training.meeting, snakeddp.training.watch). ``auto`` is a few median steps, at least
AUTO_MIN_S and at most AUTO_MAX_S; outside steps (the meeting, checkpoints, epoch ends, a partition
loading) a single operation may take AUTO_MAX_S. The collectives' own timeouts are twice the longest
wait and 30 s, so the watch has spoken (one line, naming the rank) before any of them would end a rank with a
C++ error.

Every rank's watch posts where it is (``Position``) to the run's store every POST_S seconds; a rank
that has not advanced for the shortest limit reads everyone's and ``judge``s: the rank that stopped
advancing first is the one the others wait for. No torch here: the launcher reads the limits too.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

AUTO = "auto"
AUTO_MIN_S = 60.0  # bounded below: a busy machine's slow step is no hang
AUTO_MAX_S = 180.0  # and above: a few minutes, far below torch's 30
STEPS = 5  # auto: this many median steps
TICK_S = 0.5  # how often a rank's watch looks at its own progress
POST_S = 2.0  # how often it tells the others
SILENT_S = 3 * POST_S  # a rank that has not posted for this long stopped answering
COLLECTIVE_MARGIN_S = 30.0  # the process group's timeout is twice the longest limit and this
FINISHED = "finished"  # the phase a rank posts when its fit is over: nobody waits for it
# Phases in which one operation may take long on a healthy run: auto gives them AUTO_MAX_S.
LONG_PHASES = frozenset(
    {"setup", "on_fit_start", "on_train_start", "on_train_epoch_start", "on_train_epoch_end",
     "on_validation_start", "on_validation_end", "on_validation_epoch_end", "on_save_checkpoint",
     "train_dataloader", "val_dataloader", "on_load_checkpoint", "meeting"}
)  # fmt: skip
SAVING = "saving a checkpoint"
# What a phase means for people, where a collective is under way in it.
GLOSS = {
    "backward": "backward, where DDP all-reduces the gradients",
    "on_train_batch_end": "on_train_batch_end, where the ranks agree on preemption",
    "on_train_epoch_end": "on_train_epoch_end, where the epoch's counts are all-reduced",
    "on_fit_start": "on_fit_start, where the ranks gather where each runs",
}
NCCL_ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
NCCL_HEARTBEAT = "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"
# NCCL's watchdog ends a process whose collective outlived the process group's timeout (3: without
# aborting its communicators, torch's default since 2.2, stated so a site's 0 cannot leave a hang).
TEAR_DOWN = "3"


@dataclass(frozen=True)
class HangTimeout:
    """``launch.hang_timeout``: ``auto``, seconds, or None (no watch, torch's and Lightning's own timeouts)."""

    setting: float | str | None

    @property
    def on(self) -> bool:
        return self.setting is not None

    @property
    def auto(self) -> bool:
        return self.setting == AUTO

    @property
    def longest_s(self) -> float:
        """The longest any one wait may be: the meeting's bound, and a long phase's limit."""
        return AUTO_MAX_S if self.auto else float(self.setting or 0)

    @property
    def shortest_s(self) -> float:
        """The earliest a stall can be a hang: a rank's watch reads the others' only after this long."""
        return AUTO_MIN_S if self.auto else float(self.setting or 0)

    def limit(self, position: Position) -> float:
        """How long ``position``'s rank may go without progress where it is."""
        if not self.auto:
            return float(self.setting or 0)
        if position.phase in LONG_PHASES or position.phase == SAVING or not position.step_s:
            return AUTO_MAX_S
        return min(max(STEPS * position.step_s, AUTO_MIN_S), AUTO_MAX_S)

    @property
    def collective_s(self) -> float:
        """The process group's timeout (gloo's and NCCL's collectives, the rendezvous' store): well after the
        watch's longest limit, so the watch names the rank first."""
        return 2 * self.longest_s + COLLECTIVE_MARGIN_S

    def rank_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """NCCL's watchdog settings for every rank, where the user (or network.env) set none."""
        if not self.on:
            return {}
        wanted = {
            NCCL_ASYNC_ERROR_HANDLING: TEAR_DOWN,
            # The heartbeat monitor ends a rank whose watchdog thread itself is stuck: after the watchdog's
            # own timeout could have fired.
            NCCL_HEARTBEAT: str(round(self.collective_s + AUTO_MIN_S)),
        }
        return {name: value for name, value in wanted.items() if name not in env}

    def join_timeout_s(self) -> int | None:
        """torchrun's rendezvous: how long its agents wait for every node (its default is 600 s)."""
        return round(self.longest_s) if self.on else None

    def describe(self, position: Position | None = None) -> str:
        """The setting as the HINT names it: ``auto, 60 s here`` or ``20 s``."""
        if not self.auto:
            return f"{float(self.setting or 0):g} s"
        return f"auto, {self.limit(position):g} s here" if position is not None else AUTO


@dataclass(frozen=True)
class Position:
    """Where one rank is, as its watch last posted it."""

    rank: int
    host: str
    pid: int
    node: str | None
    """The scheduler's name of its node (Slurm's, AzureML's), where that is not its host name."""
    step: int
    """Optimizer steps taken (Lightning's global_step)."""
    epoch: int
    """Counted from 0, as Lightning counts it."""
    phase: str
    """What it is in: a Lightning hook or step (training_step, backward, ...), SAVING, or FINISHED."""
    step_s: float | None
    """Its median step time so far (None before steps): auto's limit."""
    advanced_at: float
    """Wall time of its last progress (a step, a validation batch, a new phase)."""
    posted_at: float
    """Wall time of this post."""
    device: str = "cpu"
    """What it trains on (cpu, cuda:0): the pace's line names it (snakeddp.cluster.pace)."""
    own_steps: int = 0
    """Training steps it timed so far (snakeddp.training.owntime)."""
    own_s: float = 0.0
    """Their own seconds: the steps' time less what it waited for the others' gradients."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Position:
        """A post read from the run's store (another process's words): every field checked."""
        raw = json.loads(text)
        if not isinstance(raw, dict) or set(raw) != set(cls.__dataclass_fields__):
            raise ValueError(f"not a rank's position: {str(raw)[:200]}")
        for name in ("rank", "pid", "step", "epoch", "own_steps"):
            if not isinstance(raw[name], int):
                raise ValueError(f"{name} is not an integer")
        for name in ("advanced_at", "posted_at", "own_s"):
            if not isinstance(raw[name], int | float):
                raise ValueError(f"{name} is not a number")
        if not all(isinstance(raw[name], str) for name in ("host", "phase", "device")):
            raise ValueError("host, phase and device are text")
        if raw["node"] is not None and not isinstance(raw["node"], str):
            raise ValueError("node is text")
        if raw["step_s"] is not None and not isinstance(raw["step_s"], int | float):
            raise ValueError("step_s is a number")
        return cls(**raw)

    def where(self) -> str:
        """``host`` or ``node n2 (host h)``."""
        return f"node {self.node} (host {self.host})" if self.node and self.node != self.host else self.host

    def doing(self) -> str:
        return GLOSS.get(self.phase, self.phase)


@dataclass(frozen=True)
class Stall:
    """A run whose ranks stopped advancing: whom they wait for (``culprit``), and everyone else."""

    culprit: Position
    others: tuple[Position, ...]
    now: float
    limit_s: float
    together: bool = False
    """Every rank stopped at the same step in the same place and still answers: none is behind, the
    collective itself does not complete (the network, the backend)."""

    @property
    def stalled_s(self) -> float:
        return self.now - self.culprit.advanced_at

    @property
    def silent(self) -> bool:
        return self.now - self.culprit.posted_at >= SILENT_S

    @property
    def reached_step(self) -> int:
        return max(p.step for p in (self.culprit, *self.others))

    def what(self, process_state: str | None = None) -> str:
        """The line's facts: who stopped, where, when, in what; and the others."""
        c = self.culprit
        if self.together:
            return (
                f"all {len(self.others) + 1} ranks stopped advancing {self.stalled_s:.0f} s ago at step {c.step} "
                f"(epoch {c.epoch + 1}, in {c.doing()}) and all still answer, so none is behind: the collective itself "
                f"does not complete (rank {c.rank} on {c.where()}, pid {c.pid})"
            )
        # A rank reports every POST_S: one that stopped may have gone a few steps past its last report.
        at = (
            f"at its last report, which it makes every {POST_S:g} s: step {c.step}, epoch {c.epoch + 1}, in {c.doing()}"
        )
        answer = ""
        if self.silent:
            answer = f" and stopped answering{f': {process_state}' if process_state else ''}"
        told = f"rank {c.rank} on {c.where()} (pid {c.pid}) stopped advancing {self.stalled_s:.0f} s ago ({at}){answer}"
        return f"{told}; {waiting(self.others)}" if self.others else told


def waiting(others: Iterable[Position]) -> str:
    """The other ranks, grouped by where they wait: ``ranks 0, 2-5 wait at step 312 in backward``."""
    groups: dict[tuple[int, str], list[int]] = {}
    for position in others:
        groups.setdefault((position.step, position.doing()), []).append(position.rank)
    parts = []
    for (step, doing), ranks in sorted(groups.items(), key=lambda item: min(item[1])):
        if doing == FINISHED:
            parts.append(f"{ranks_text(ranks)} finished")
        else:
            verb = "waits" if len(ranks) == 1 else "wait"
            parts.append(f"{ranks_text(ranks)} {verb} at step {step} in {doing}")
    return "; ".join(parts)


def ranks_text(ranks: Sequence[int]) -> str:
    """``rank 3``, ``ranks 0, 2-5``."""
    ranks = sorted(ranks)
    spans: list[list[int]] = []
    for rank in ranks:
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    return f"rank {text}" if len(ranks) == 1 else f"ranks {text}"


def judge(positions: Sequence[Position], now: float, timeout: HangTimeout) -> Stall | None:
    """Whether the run is hung: the rank that stopped advancing first has been still for longer than its
    limit. None while every rank advances, or the stillest is within its limit (a long checkpoint)."""
    waiting_ranks = [p for p in positions if p.phase != FINISHED]
    if not waiting_ranks:
        return None
    # The one the others wait for stopped answering (a stopped or dead process), else stopped advancing first:
    # samples a tick apart, so within the same second the longer silence decides.
    culprit = max(
        waiting_ranks,
        key=lambda p: (now - p.posted_at >= SILENT_S, round(now - p.advanced_at), now - p.posted_at, -p.rank),
    )
    others = tuple(p for p in positions if p is not culprit)
    limit = _limit(culprit, others, now, timeout)
    if now - culprit.advanced_at < limit:
        return None
    together = (
        len(waiting_ranks) == len(positions) > 1
        and len({(p.step, p.phase) for p in positions}) == 1
        and all(now - p.posted_at < SILENT_S for p in positions)
    )
    return Stall(culprit, others, now, limit, together)


def _limit(culprit: Position, others: Sequence[Position], now: float, timeout: HangTimeout) -> float:
    """The culprit's limit where it still reports; where it stopped answering (a stopped or dead process), its last
    post's phase is stale (it posts every POST_S s: a rank that stopped a few steps into an epoch last said
    "validation" or "checkpoint", auto's longest), so the limit is that of where the others wait for it."""
    waiting = [p for p in others if p.phase != FINISHED]
    if now - culprit.posted_at < SILENT_S or not waiting:
        return timeout.limit(culprit)
    return max(timeout.limit(p) for p in waiting)


def median_step(intervals: Sequence[float]) -> float | None:
    return statistics.median(intervals) if intervals else None


def step_time(intervals: Sequence[float], own_steps: int, own_s: float) -> float | None:
    """A rank's step time for auto's limit: the median of the intervals its watch timed, else (steps faster than a
    tick, TICK_S, all taken before the watch's first look: it timed none, and auto would wait AUTO_MAX_S for a rank
    stopped after them) what the rank's own timing of its steps says a step costs; None before any step."""
    return median_step(intervals) or (own_s / own_steps if own_steps else None)


def lines_of(
    stall: Stall,
    run_id: str,
    checkpoint: str,
    process_state: Callable[[Position], str | None],
    evidence: str | None = None,
) -> str:
    """The one line a hung run ends with: what happened, where its evidence is (``evidence``: the ranks' stacks
    file, snakeddp.training.gather), then what the user does."""
    kept = f" Every rank's Python stack: {evidence}." if evidence else ""
    return (
        f"run {run_id} hung: {stall.what(process_state(stall.culprit))}.{kept} HINT: the ranks were stopped and the "
        f"last checkpoint is kept ({checkpoint}): rerun to resume from it; a step that needs longer than "
        f"{stall.limit_s:g} s needs a larger launch.hang_timeout."
    )


def record(stall: Stall, line: str, kind: str = "stopped") -> dict[str, Any]:
    """What the run directory keeps of a hang (hung.json, then the try's ``hang``: snakeddp.run.tries)."""
    return {
        "kind": "stuck_together" if stall.together else kind,
        "culprit": {
            "rank": stall.culprit.rank,
            "host": stall.culprit.host,
            "node": stall.culprit.node,
            "pid": stall.culprit.pid,
            "step": stall.culprit.step,
            "epoch": stall.culprit.epoch,
            "phase": stall.culprit.phase,
        },
        "stalled_s": round(stall.stalled_s, 1),
        "limit_s": stall.limit_s,
        "reached_step": stall.reached_step,
        "line": line,
    }
