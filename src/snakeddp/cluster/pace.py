"""Which rank is slow while the run goes on (``launch.straggler``), scored from what the ranks already post.

In synchronous DDP every rank takes its steps at the same rate: a slow rank (a throttled GPU, a swapping node)
keeps the others waiting in each all-reduce, so the step time says nothing of who is slow. A rank's *own* time
does: the step's wall time less what it waited for the gradients' all-reduce (snakeddp.training.owntime; clock
reads, no collective). Each rank posts its totals with its position every POST_S (snakeddp.training.watch), and
rank 0's watch reads them all and ``Paces.update`` scores each rank over the last SMOOTH_S:

- relative: the fastest rank's own seconds per step over this rank's (1.0: the fastest; 0.5: half its pace);
- individual: this rank's best over the last window (launch.straggler_window) over its own now.

A rank whose relative score stays under launch.straggler_ratio for the window is named in one line (``line``),
once a slow spell: again only after it recovered (SMOOTH_S at or above the ratio) and slowed again. With
``launch.straggler: stop`` the run then ends as a hang does (``record``: hung.json, kind "slow"). No torch here:
config validation and the launcher read it too.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

NAME, STOP = "name", "stop"
# Own time is read from the host's clock (snakeddp.training.owntime). On a CUDA device the host waits for a kernel
# only where it synchronises (the all-reduce's wait, a .item()), so a slow kernel shows there, not where it ran:
# the record says so rather than pass a host's view for the GPU's.
HOST_CLOCK = "host"
# A post covers 2 s: too few steps on a busy machine, or with a rank stopped and continued in turns. The scores
# are taken over this many seconds of posts, and a spell ends only after this long back at pace.
SMOOTH_S = 10.0


@dataclass(frozen=True)
class Straggler:
    """``launch.straggler`` (name, stop, or None: not scored), ``straggler_ratio`` and ``straggler_window``."""

    action: str | None
    ratio: float
    window_s: float

    @classmethod
    def of(cls, launch: Any) -> Straggler:
        return cls(launch.straggler, float(launch.straggler_ratio), float(launch.straggler_window))

    @property
    def on(self) -> bool:
        return self.action is not None


@dataclass
class Spell:
    """A time a rank's relative score stayed under the ratio."""

    since: float
    lowest: float
    named_at: float | None = None
    until: float | None = None
    back_since: float | None = None
    """When its score came back to the ratio: the spell ends SMOOTH_S later, unless it drops again."""

    def as_record(self) -> dict[str, Any]:
        return {
            "since": utc(self.since),
            "until": utc(self.until) if self.until is not None else None,
            "seconds": round((self.until or self.named_at or self.since) - self.since, 1),
            "lowest": round(self.lowest, 3),
        }


@dataclass
class RankPace:
    """One rank's posts (when, steps timed, own seconds) and its scores."""

    rank: int
    host: str
    node: str | None
    device: str
    pid: int
    posts: collections.deque[tuple[float, int, float]] = field(default_factory=collections.deque)
    smoothed: collections.deque[tuple[float, float]] = field(default_factory=collections.deque)
    """(when, own seconds per step over SMOOTH_S) within the window: its own best."""
    first: tuple[int, float] | None = None
    relative: float | None = None
    individual: float | None = None
    lowest: float | None = None
    spell: Spell | None = None
    spells: list[Spell] = field(default_factory=list)

    def where(self) -> str:
        return f"node {self.node} (host {self.host})" if self.node and self.node != self.host else self.host

    def own_step_s(self) -> float | None:
        """Own seconds per step over the posts of the last SMOOTH_S; None without steps in them."""
        if len(self.posts) < 2:
            return None
        (_, steps_then, own_then), (_, steps_now, own_now) = self.posts[0], self.posts[-1]
        steps = steps_now - steps_then
        return (own_now - own_then) / steps if steps > 0 else None

    def overall_s(self) -> float | None:
        """Own seconds per step over everything it posted."""
        if self.first is None or not self.posts:
            return None
        steps = self.posts[-1][1] - self.first[0]
        return (self.posts[-1][2] - self.first[1]) / steps if steps > 0 else None


@dataclass(frozen=True)
class Slow:
    """A rank named: slow for the window, at ``relative`` of the fastest (``fastest``) and ``individual`` of its own
    best of the window."""

    rank: RankPace
    fastest: RankPace
    relative: float
    individual: float
    since: float
    now: float
    window_s: float

    @property
    def slow_s(self) -> float:
        return self.now - self.since


def utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


class Paces:
    """Every rank's scores, from the posts rank 0's watch reads every POST_S."""

    def __init__(self, straggler: Straggler) -> None:
        self.straggler = straggler
        self.ranks: dict[int, RankPace] = {}

    def update(self, positions: Iterable[Any], now: float) -> list[Slow]:
        """Take the ranks' latest posts (``hang.Position``s); the ranks that have just been slow for the window."""
        own: dict[int, float] = {}
        for position in positions:
            seconds = self._take(position, now)
            if seconds is not None:
                own[position.rank] = seconds
        if len(own) < 2:
            return []
        fastest_rank = min(own, key=own.__getitem__)
        named = []
        for rank, seconds in own.items():
            pace = self.ranks[rank]
            relative = own[fastest_rank] / seconds if seconds > 0 else 1.0
            best = min(s for _, s in pace.smoothed)
            pace.relative, pace.individual = relative, best / seconds if seconds > 0 else 1.0
            pace.lowest = relative if pace.lowest is None else min(pace.lowest, relative)
            if self._spell(pace, relative, now):
                since, window = pace.spell.since, self.straggler.window_s  # type: ignore[union-attr]
                named.append(Slow(pace, self.ranks[fastest_rank], relative, pace.individual, since, now, window))
        return named

    def _take(self, position: Any, now: float) -> float | None:
        """Add a post to its rank's; its own seconds per step over SMOOTH_S, where it took steps."""
        pace = self.ranks.setdefault(position.rank, RankPace(position.rank, "", None, "", 0))
        # From its latest post: the meeting's first one, before its watch's, does not know its device.
        pace.host, pace.node, pace.device, pace.pid = position.host, position.node, position.device, position.pid
        post = (position.posted_at, position.own_steps, position.own_s)
        if not pace.posts or post[0] > pace.posts[-1][0]:
            pace.posts.append(post)
            pace.first = pace.first or post[1:]
        while len(pace.posts) > 2 and pace.posts[1][0] <= now - SMOOTH_S:
            pace.posts.popleft()
        # A rank that has not posted for SMOOTH_S scores nothing: a stopped one is the hang watch's to name.
        seconds = pace.own_step_s() if pace.posts[-1][0] > now - SMOOTH_S else None
        if seconds is None:
            return None
        pace.smoothed.append((now, seconds))
        while pace.smoothed[0][0] < now - self.straggler.window_s:
            pace.smoothed.popleft()
        return seconds

    def _spell(self, pace: RankPace, relative: float, now: float) -> bool:
        """Track the rank's slow spell; True when it has just lasted the window (named once a spell)."""
        spell = pace.spell
        if relative >= self.straggler.ratio:
            if spell is not None:
                spell.back_since = spell.back_since or now
                if now - spell.back_since >= SMOOTH_S:
                    spell.until, pace.spell = spell.back_since, None
            return False
        if spell is None:
            spell = pace.spell = Spell(since=now, lowest=relative)
        spell.back_since, spell.lowest = None, min(spell.lowest, relative)
        if spell.named_at is None and now - spell.since >= self.straggler.window_s:
            spell.named_at = now
            pace.spells.append(spell)
            return True
        return False

    def scores(self) -> dict[int, dict[str, Any]]:
        """Each rank's scores for provenance (launch.ranks[].pace): own seconds per step over the try, relative to
        the fastest rank's; the last and lowest windowed scores; the named slow spells; the clock they were read
        from (HOST_CLOCK)."""
        overall = {rank: pace.overall_s() for rank, pace in self.ranks.items()}
        known = [s for s in overall.values() if s]
        fastest = min(known) if known else None
        return {
            rank: {
                "own_step_s": round(overall[rank], 6) if overall[rank] is not None else None,
                "relative": round(fastest / overall[rank], 3) if fastest and overall[rank] else None,
                "last_relative": _rounded(pace.relative),
                "last_individual": _rounded(pace.individual),
                "lowest_relative": _rounded(pace.lowest),
                "slow_spells": [spell.as_record() for spell in pace.spells],
                "clock": HOST_CLOCK,
            }
            for rank, pace in sorted(self.ranks.items())
        }


def _rounded(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def into_ranks(ranks: list[dict[str, Any]], scores: Mapping[int, Mapping[str, Any]]) -> None:
    """Put each rank's scores into provenance's launch.ranks entry (``pace``)."""
    for entry in ranks:
        if entry["rank"] in scores:
            entry["pace"] = dict(scores[entry["rank"]])


def facts(slow: Slow) -> str:
    """Who is slow, where, how slow and since when."""
    rank, fastest = slow.rank, slow.fastest
    return (
        f"rank {rank.rank} on {rank.where()} ({rank.device}, pid {rank.pid}) has run at {slow.relative:.2f}x the pace "
        f"of the fastest rank (rank {fastest.rank} on {fastest.where()}) for {slow.slow_s:.0f} s, since "
        f"{utc(slow.since)}, and at {slow.individual:.2f}x its own best of the last {slow.window_s:g} s (a rank's "
        f"pace: its own time per step, without its waits for the others)"
    )


def look_at(slow: Slow) -> str:
    """Where a slow rank's cause is usually found."""
    device = slow.rank.device
    if device.startswith("cuda"):
        which = f" -i {device.split()[-1]}" if " GPU-" in device else ""  # the watch adds the UUID it knows
        return (
            f"look at that GPU (nvidia-smi -q -d PERFORMANCE,TEMPERATURE{which} on {slow.rank.host} says whether it "
            "throttles) and its host (its load, its memory, its link)"
        )
    return "look at that host (another program on its cores, its memory swapping, its link)"


def line(slow: Slow, run_id: str, recorded: str | None = None) -> str:
    """The one line that names a slow rank while the run goes on (``recorded``: the ledger of nodes that keeps it)."""
    kept = f"; its node's slow spell is recorded in {recorded}" if recorded else ""
    return (
        f"run {run_id} is slowed by one rank: {facts(slow)}; every other rank waits for it at each step, and the "
        f"run goes on{kept}. HINT: {look_at(slow)}, or set launch.straggler: stop to end such a run at once (the "
        f"last checkpoint is kept, and a retry on a scheduler that places jobs leaves its node out)."
    )


def stop_line(slow: Slow, run_id: str, checkpoint: str) -> str:
    """The one line a run stopped for a slow rank (launch.straggler: stop) ends with."""
    return (
        f"run {run_id} stopped for a slow rank (launch.straggler: stop): {facts(slow)}. HINT: the ranks were "
        f"stopped and the last checkpoint is kept ({checkpoint}): rerun to resume from it (where the "
        f"scheduler places jobs, without that node); set launch.straggler: name to only name such a rank and go on."
    )


def record(slow: Slow, text: str, step: int, epoch: int, phase: str, reached_step: int) -> dict[str, Any]:
    """hung.json for a run stopped for a slow rank: the try is 'hung', its culprit the slow rank (Slurm leaves its
    node out of the retry: snakeddp.slurm.exclude)."""
    rank = slow.rank
    return {
        "kind": "slow",
        "culprit": {"rank": rank.rank, "host": rank.host, "node": rank.node, "pid": rank.pid, "step": step,
                    "epoch": epoch, "phase": phase},
        "stalled_s": round(slow.slow_s, 1),
        "limit_s": slow.window_s,
        "reached_step": reached_step,
        "relative": round(slow.relative, 3),
        "line": text,
    }  # fmt: skip
