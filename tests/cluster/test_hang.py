"""launch.hang_timeout's limits and the judging of ranks' posts (snakeddp.cluster.hang)."""

from __future__ import annotations

import pytest

from snakeddp.cluster.hang import (
    AUTO_MAX_S,
    AUTO_MIN_S,
    FINISHED,
    NCCL_ASYNC_ERROR_HANDLING,
    NCCL_HEARTBEAT,
    SAVING,
    SILENT_S,
    HangTimeout,
    Position,
    judge,
    ranks_text,
    step_time,
    waiting,
)
from snakeddp.config import validate
from snakeddp.config.parts import Launch

NOW = 1_000_000.0


def at(rank: int, *, still: float, silent: float = 0.0, step: int = 100, phase: str = "backward",
       step_s: float | None = 0.01) -> Position:  # fmt: skip
    """Rank ``rank``'s last post: ``silent`` s ago, having last advanced ``still`` s ago."""
    return Position(rank, "h", 1000 + rank, None, step, 3, phase, step_s, NOW - still, NOW - silent)


def test_the_default_is_auto_and_a_run_config_may_say_seconds_or_null():
    assert Launch.of(validate({})["launch"]).hang_timeout == "auto"
    assert Launch.of(validate({"launch": {"hang_timeout": 12}})["launch"]).hang_timeout == 12
    assert Launch.of(validate({"launch": {"hang_timeout": None}})["launch"]).hang_timeout is None
    for refused in (4, 0, "soon"):
        with pytest.raises(Exception, match="hang_timeout"):
            validate({"launch": {"hang_timeout": refused}})


@pytest.mark.parametrize(
    ("step_s", "phase", "limit"),
    [
        (0.01, "backward", AUTO_MIN_S),  # a fast step: the floor
        (20.0, "training_step", 100.0),  # five median steps
        (100.0, "backward", AUTO_MAX_S),  # the ceiling
        (None, "backward", AUTO_MAX_S),  # no step measured yet
        (0.01, SAVING, AUTO_MAX_S),  # a checkpoint
        (0.01, "on_train_epoch_end", AUTO_MAX_S),  # an epoch's end
        (0.01, "meeting", AUTO_MAX_S),
    ],
)
def test_auto_gives_a_step_a_few_median_steps_within_bounds_and_other_phases_the_longest(step_s, phase, limit):
    assert HangTimeout("auto").limit(at(0, still=0, phase=phase, step_s=step_s)) == limit


def test_seconds_apply_everywhere_and_the_collectives_wait_longer_than_the_watch():
    seconds = HangTimeout(12)
    assert seconds.limit(at(0, still=0, phase=SAVING)) == seconds.limit(at(0, still=0)) == 12
    assert seconds.shortest_s == seconds.longest_s == 12
    assert seconds.collective_s > 2 * seconds.longest_s
    assert HangTimeout("auto").collective_s > 2 * AUTO_MAX_S
    off = HangTimeout(None)
    assert not off.on and off.rank_env({}) == {} and off.join_timeout_s() is None


def test_nccl_is_told_to_end_a_stuck_collective_unless_the_user_said_otherwise():
    env = HangTimeout("auto").rank_env({})
    assert env[NCCL_ASYNC_ERROR_HANDLING] == "3"
    assert float(env[NCCL_HEARTBEAT]) > HangTimeout("auto").collective_s
    assert NCCL_HEARTBEAT not in HangTimeout("auto").rank_env({NCCL_HEARTBEAT: "900"})
    assert HangTimeout(30).join_timeout_s() == 30


def test_the_rank_that_stopped_first_and_stopped_answering_is_the_one_the_others_wait_for():
    stopped = at(1, still=61, silent=61, step=311, phase="training_step")
    waiting_ranks = [at(0, still=60, step=312), at(2, still=60, step=312), at(3, still=59, step=312)]
    stall = judge([waiting_ranks[0], stopped, *waiting_ranks[1:]], NOW, HangTimeout("auto"))
    assert stall is not None and stall.culprit == stopped and stall.silent and not stall.together
    assert stall.reached_step == 312 and stall.limit_s == AUTO_MIN_S
    said = stall.what("its process is stopped")
    assert said.startswith(
        "rank 1 on h (pid 1001) stopped advancing 61 s ago (at its last report, which it makes every 2 s: "
        "step 311, epoch 4"
    )
    assert "stopped answering: its process is stopped" in said
    assert said.endswith("ranks 0, 2-3 wait at step 312 in backward, where DDP all-reduces the gradients")


def test_a_rank_within_its_limit_is_no_hang_and_a_finished_one_is_waited_for_by_nobody():
    assert judge([at(0, still=59), at(1, still=59)], NOW, HangTimeout("auto")) is None
    # A long checkpoint: 3 minutes, not 60 s.
    assert judge([at(0, still=170, phase=SAVING), at(1, still=160)], NOW, HangTimeout("auto")) is None
    # Rank 1 finished its fit and went quiet; rank 0, still writing, waits for nobody.
    assert judge([at(0, still=10), at(1, still=500, silent=500, phase=FINISHED)], NOW, HangTimeout(5)) is not None
    assert judge([at(1, still=500, silent=500, phase=FINISHED)], NOW, HangTimeout(5)) is None


def test_the_hints_larger_hang_timeout_lets_a_slow_step_through():
    """The hang line's HINT: a step that needs longer than the limit needs a larger launch.hang_timeout."""
    slow = [at(0, still=6, step_s=None), at(1, still=6.5, step_s=None)]
    assert judge(slow, NOW, HangTimeout(5)) is not None
    assert judge(slow, NOW, HangTimeout(20)) is None


def test_ranks_stuck_together_in_one_collective_are_said_to_be_none_behind():
    stall = judge([at(0, still=70), at(1, still=70)], NOW, HangTimeout("auto"))
    assert stall is not None and stall.together
    assert "all 2 ranks stopped advancing 70 s ago at step 100" in stall.what() and "none is behind" in stall.what()


def test_other_ranks_are_grouped_by_where_they_wait():
    others = [at(r, still=1, step=312) for r in (0, 2, 3, 4, 5, 9)] + [at(7, still=1, step=311, phase="optimizer_step")]
    assert waiting(others) == (
        "ranks 0, 2-5, 9 wait at step 312 in backward, where DDP all-reduces the gradients; "
        "rank 7 waits at step 311 in optimizer_step"
    )
    assert ranks_text([4]) == "rank 4" and ranks_text([3, 1, 2, 7]) == "ranks 1-3, 7"


@pytest.mark.parametrize(
    "text",
    [
        b"not json",
        b"[1, 2]",
        b'{"rank": 1}',
        at(0, still=1).to_json().replace('"step": 100', '"step": "100"').encode(),
        at(0, still=1).to_json().replace('"host": "h"', '"host": 7').encode(),
    ],
)
def test_a_post_that_is_no_ranks_position_is_refused(text):
    with pytest.raises((ValueError, TypeError)):
        Position.from_json(text)


def test_a_post_reads_back_as_it_was_posted():
    posted = at(3, still=2.5, silent=1.0)
    assert Position.from_json(posted.to_json()) == posted
    assert SILENT_S > 2  # a rank posts every 2 s: silent means several posts missed


def test_a_rank_that_stopped_answering_is_named_even_when_a_waiting_rank_sampled_its_last_advance_earlier():
    # Rank 0 blocked in the next collective a moment after rank 1 stopped, but its last sample that saw it
    # advance came a tick before rank 1's.
    stall = judge([at(0, still=62, step=312), at(1, still=61, silent=61, step=311)], NOW, HangTimeout("auto"))
    assert stall is not None and stall.culprit.rank == 1


def test_a_rank_that_stopped_answering_gets_the_limit_of_where_the_others_wait_not_of_its_stale_phase():
    """Stopped a few steps into an epoch, rank 1's last post (2 s before) said the previous epoch's validation,
    a long phase; the others wait for it in backward: auto's step limit, not its longest (the default setting
    took 3 minutes to name a stopped rank, past issue 53's two)."""
    stopped = at(1, still=61, silent=61, step=311, phase="on_validation_epoch_end")
    stall = judge([at(0, still=60, step=312), stopped], NOW, HangTimeout("auto"))
    assert stall is not None and stall.culprit == stopped and stall.limit_s == AUTO_MIN_S
    # Still answering, the same phase is what it says it is in: a long one.
    answering = at(1, still=61, silent=1, step=311, phase="on_validation_epoch_end")
    assert judge([at(0, still=60, step=312), answering], NOW, HangTimeout("auto")) is None
    # The others wait in a long phase (a checkpoint's barrier): the long limit stands.
    assert judge([at(0, still=60, step=312, phase=SAVING), stopped], NOW, HangTimeout("auto")) is None


def test_steps_faster_than_the_watchs_tick_still_give_auto_its_step_time():
    """Twelve steps of 5 ms, all before the watch's first look (every 0.5 s): it timed no interval. Auto then gave
    a rank that slept in training_step after them 180 s, and a 90 s stall went unnamed; the rank's own timing of
    its steps gives the training step its 60 s."""
    assert step_time([], own_steps=12, own_s=0.06) == pytest.approx(0.005)
    assert step_time([0.2, 0.4, 0.3], own_steps=12, own_s=0.06) == 0.3, "the intervals the watch timed come first"
    assert step_time([], own_steps=0, own_s=0.0) is None, "before any step: auto's longest"
    timeout = HangTimeout("auto")
    fast = at(1, still=0.0, phase="training_step", step_s=step_time([], 12, 0.06))
    assert timeout.limit(fast) == AUTO_MIN_S
