"""The slow-rank scores (snakeddp.cluster.pace): ranks' own step times from their posts, compared with the fastest
rank's and with their own best, named once a spell."""

from __future__ import annotations

import json

import jsonschema
import pytest

from snakeddp.cluster import pace
from snakeddp.cluster.hang import POST_S, Position
from snakeddp.config import validate
from snakeddp.config.parts import Launch
from snakeddp.errors import ConfigError
from snakeddp.run import tries

START = 1_000_000.0
STRAGGLER = pace.Straggler(pace.NAME, 0.7, 60.0)


class Ranks:
    """Posts of ranks that take one step every 10 ms of wall time, each with its own seconds per step."""

    def __init__(self, own_step_s: dict[int, float]) -> None:
        self.own_step_s = dict(own_step_s)
        self.totals = {rank: (0, 0.0) for rank in own_step_s}
        self.now = START

    def post(self, seconds: float = POST_S) -> list[Position]:
        self.now += seconds
        steps = round(seconds / 0.01)
        posts = []
        for rank, own in self.own_step_s.items():
            done, spent = self.totals[rank]
            self.totals[rank] = (done + steps, spent + steps * own)
            posts.append(
                Position(rank, f"host-{rank}", 100 + rank, f"n{rank}", 50, 0, "backward", 0.01, self.now, self.now,
                         "cpu", *self.totals[rank])
            )  # fmt: skip
        return posts


def run(paces: pace.Paces, ranks: Ranks, seconds: float) -> list[tuple[float, pace.Slow]]:
    """Post every POST_S for ``seconds``; each naming with when it came."""
    named = []
    for _ in range(round(seconds / POST_S)):
        named += [(ranks.now - START, slow) for slow in paces.update(ranks.post(), ranks.now)]
    return named


def test_a_rank_at_half_the_pace_is_named_once_after_the_window_with_its_scores():
    paces, ranks = pace.Paces(STRAGGLER), Ranks({0: 0.004, 1: 0.004, 2: 0.004})
    assert run(paces, ranks, 30) == []
    ranks.own_step_s[2] = 0.008  # half the pace of the others from now
    slowed_at = ranks.now - START
    named = run(paces, ranks, 120)
    assert len(named) == 1, "once a spell, not every post"
    at, slow = named[0]
    assert 60 <= at - slowed_at <= 60 + pace.SMOOTH_S + POST_S
    assert slow.rank.rank == 2 and slow.fastest.rank in (0, 1)
    assert slow.relative == pytest.approx(0.5) and slow.slow_s >= 60
    # Slow for the whole window: its own best of the window is from the spell's start, already under the ratio.
    assert 0.7 <= slow.individual < 1.0
    text = pace.line(slow, "base")
    assert "rank 2 on node n2 (host host-2) (cpu, pid 102) has run at 0.50x the pace of the fastest rank" in text
    assert "HINT: " in text and "launch.straggler: stop" in text and "\n" not in text
    assert "goes on; its node's slow spell is recorded in results/nodes.json. HINT" in pace.line(
        slow, "base", "results/nodes.json"
    )
    scores = paces.scores()
    assert scores[2]["lowest_relative"] == pytest.approx(0.5) and scores[0]["lowest_relative"] == 1.0
    assert len(scores[2]["slow_spells"]) == 1 and scores[2]["slow_spells"][0]["until"] is None
    assert scores[0]["slow_spells"] == [] and scores[0]["relative"] == 1.0 and 0.5 < scores[2]["relative"] < 1


def test_a_rank_that_recovers_and_slows_again_is_named_again_and_a_short_spell_never():
    paces, ranks = pace.Paces(STRAGGLER), Ranks({0: 0.004, 1: 0.004})
    run(paces, ranks, 20)
    ranks.own_step_s[1] = 0.01
    assert len(run(paces, ranks, 80)) == 1
    ranks.own_step_s[1] = 0.004
    assert run(paces, ranks, 40) == []
    ranks.own_step_s[1] = 0.01  # again, but shorter than the window
    assert run(paces, ranks, 40) == []
    ranks.own_step_s[1] = 0.004
    run(paces, ranks, 40)
    ranks.own_step_s[1] = 0.01
    assert len(run(paces, ranks, 80)) == 1
    spells = paces.scores()[1]["slow_spells"]
    assert len(spells) == 2 and spells[0]["until"] is not None and spells[0]["lowest"] == pytest.approx(0.4)


def test_a_rank_that_slowed_from_its_own_best_says_so_while_the_window_holds_its_fast_steps():
    paces, ranks = pace.Paces(pace.Straggler(pace.NAME, 0.7, 120.0)), Ranks({0: 0.004, 1: 0.004})
    run(paces, ranks, 60)
    ranks.own_step_s[1] = 0.008
    run(paces, ranks, 20)
    assert paces.ranks[1].individual == pytest.approx(0.5) and paces.ranks[1].relative == pytest.approx(0.5)


def test_ranks_at_the_same_pace_a_rank_without_steps_and_a_lone_rank_name_nobody():
    paces, ranks = pace.Paces(STRAGGLER), Ranks({0: 0.004, 1: 0.005})  # 0.8: within 0.7
    assert run(paces, ranks, 120) == []
    lone = pace.Paces(STRAGGLER)
    only = Ranks({0: 0.004, 1: 0.02})
    for _ in range(60):
        assert lone.update(only.post()[:1], only.now) == []
    # Posts without steps between them (validation, a checkpoint) score nothing.
    still = Ranks({0: 0.004, 1: 0.02})
    posts = still.post()
    for _ in range(60):
        still.now += POST_S
        assert lone.update([p.__class__(**{**p.__dict__, "posted_at": still.now}) for p in posts], still.now) == []


def test_a_rank_is_named_with_the_device_of_its_latest_post_not_the_meeting_s():
    paces, ranks = pace.Paces(STRAGGLER), Ranks({0: 0.004, 1: 0.008})
    meeting = [p.__class__(**{**p.__dict__, "device": "cpu", "own_steps": 0, "own_s": 0.0}) for p in ranks.post()]
    paces.update(meeting, ranks.now)
    named = []
    for _ in range(40):
        posts = [p.__class__(**{**p.__dict__, "device": f"cuda:{p.rank}"}) for p in ranks.post()]
        named += paces.update(posts, ranks.now)
    assert [slow.rank.device for slow in named] == ["cuda:1"]
    assert "(cuda:1, pid 101)" in pace.line(named[0], "base") and "that GPU (nvidia-smi" in pace.line(named[0], "base")
    named[0].rank.device = "cuda:1 GPU-8a6f0e2c-1111-2222-3333-444455556666"  # as the watch says a GPU it knows
    assert "nvidia-smi -q -d PERFORMANCE,TEMPERATURE -i GPU-8a6f0e2c-1111-2222-3333-444455556666 on host-1" in (
        pace.line(named[0], "base")
    )


def test_a_rank_that_stopped_posting_scores_nothing_and_is_left_to_the_hang_watch():
    paces, ranks = pace.Paces(STRAGGLER), Ranks({0: 0.004, 1: 0.004})
    run(paces, ranks, 20)
    ranks.own_step_s[1] = 0.02
    last = ranks.post()[1]  # its last post, slow
    for _ in range(60):
        fresh = ranks.post()[0]
        assert paces.update([fresh, last], ranks.now) == []


def test_the_stop_record_is_a_hang_record_and_names_the_slow_rank_s_node():
    paces, ranks = pace.Paces(pace.Straggler(pace.STOP, 0.7, 10.0)), Ranks({0: 0.004, 1: 0.012})
    ((_, slow),) = run(paces, ranks, 40)[:1]
    text = pace.stop_line(slow, "base", "results/runs/base/checkpoints/last.ckpt")
    kept = pace.record(slow, f"snakeddp.train: {text}", 50, 0, "backward", 51)
    assert kept["kind"] == "slow" and kept["culprit"]["node"] == "n1" and kept["limit_s"] == 10.0
    assert "HINT: " in text and "rerun to resume" in text
    # tries.json keeps it as a hang's, and Slurm's retry leaves its node out (snakeddp.slurm.exclude).
    jsonschema.validate(kept, {"$ref": "#/$defs/hang", "$defs": tries.schema()["$defs"]})
    assert tries.hang_nodes([{"outcome": "hung", "hang": kept}]) == ["n1"]


def test_the_settings_default_to_naming_at_0_7_for_60_s_and_refuse_what_cannot_be():
    launch = Launch.of(validate({})["launch"])
    assert pace.Straggler.of(launch) == pace.Straggler("name", 0.7, 60.0)
    chosen = Launch.of(
        validate({"launch": {"straggler": "stop", "straggler_ratio": 0.5, "straggler_window": 30}})["launch"]
    )
    assert pace.Straggler.of(chosen) == pace.Straggler("stop", 0.5, 30.0)
    assert not pace.Straggler.of(Launch.of(validate({"launch": {"straggler": None}})["launch"])).on
    for refused in ({"straggler": "kill"}, {"straggler_ratio": 1.5}, {"straggler_ratio": 0}, {"straggler_window": 2}):
        with pytest.raises(Exception, match="straggler"):
            validate({"launch": refused})


def test_a_straggler_setting_without_the_watch_is_refused_and_its_hint_validates():
    for key, value in (("straggler", "stop"), ("straggler_ratio", 0.5), ("straggler_window", 30)):
        with pytest.raises(
            ConfigError, match=f"launch.{key} only applies with launch.hang_timeout \\(auto or seconds\\).*HINT: "
        ):
            validate({"launch": {"hang_timeout": None, key: value}})
        # The HINT: set launch.hang_timeout as well, to auto or a number of seconds.
        assert Launch.of(validate({"launch": {"hang_timeout": "auto", key: value}})["launch"]).hang_timeout == "auto"
        assert Launch.of(validate({"launch": {"hang_timeout": 90, key: value}})["launch"]).hang_timeout == 90
    assert not pace.Straggler.of(
        Launch.of(validate({"launch": {"hang_timeout": None, "straggler": None}})["launch"])
    ).on


def test_a_post_keeps_its_own_time_and_one_without_it_is_not_a_position():
    post = Position(1, "h", 7, None, 3, 0, "backward", 0.01, 1.0, 2.0, "cuda:1", 40, 0.25)
    assert Position.from_json(post.to_json()) == post
    raw = json.loads(post.to_json())
    for broken in ({"own_s": "fast"}, {"own_steps": 1.5}, {"device": None}):
        with pytest.raises(ValueError):
            Position.from_json(json.dumps({**raw, **broken}))
    with pytest.raises(ValueError):
        Position.from_json(json.dumps({k: v for k, v in raw.items() if k != "own_s"}))
