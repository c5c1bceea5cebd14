"""A try's account (snakeddp.run.account): its seconds split into Goodput's buckets, queue wait, GPU-hours."""

from __future__ import annotations

import pytest

from snakeddp.errors import RunStateError
from snakeddp.run import account, tries

POSTED = {
    "productive_s": 50.0,
    "productive_at_save_s": 30.0,
    "accelerator_init_s": 4.0,
    "program_startup_s": 10.0,
    "data_loading_s": 6.0,
    "checkpoint_save_s": 2.0,
    "checkpoint_restore_s": 1.0,
    "gpu_util_mean": 81.5,
    "gpu_util_samples": 40,
}


def test_a_completed_try_keeps_every_productive_second_and_the_rest_is_other():
    split = account.buckets(100.0, "completed", POSTED)
    assert split["productive_s"] == 50.0 and split["disruption_lost_s"] == 0.0
    assert split["other_s"] == 100.0 - (50 + 4 + 10 + 6 + 2 + 1)
    assert sum(split.values()) == pytest.approx(100.0)
    assert list(split) == list(account.BUCKETS)


def test_a_disrupted_try_loses_the_productive_seconds_after_its_last_save():
    split = account.buckets(100.0, "hung", POSTED)
    assert (split["productive_s"], split["disruption_lost_s"]) == (30.0, 20.0)
    assert sum(split.values()) == pytest.approx(100.0)


def test_a_try_rank_0_never_posted_for_is_all_other_and_says_so():
    got = account.of_try(seconds=12.5, outcome="failed", posted=None, gpus=2, queue_wait_s=None)
    assert got["measured"] is False and got["buckets"]["other_s"] == 12.5
    assert sum(got["buckets"].values()) == pytest.approx(12.5)
    assert got["queue_wait_s"] is None and got["gpu_util_mean"] is None


def test_measures_past_the_launchers_seconds_are_scaled_to_them_never_beyond():
    split = account.buckets(60.0, "completed", POSTED)  # rank 0 measured 73 s of a 60 s try: clocks apart
    assert sum(split.values()) == pytest.approx(60.0, abs=0.01) and split["other_s"] == 0.0


def test_gpu_hours_are_gpus_times_elapsed_and_a_cpu_try_has_no_utilisation():
    on_gpus = account.of_try(seconds=1800, outcome="completed", posted=POSTED, gpus=8, queue_wait_s=42.0)
    assert on_gpus["gpu_hours"] == 4.0 and on_gpus["gpu_util_mean"] == 81.5 and on_gpus["queue_wait_s"] == 42.0
    on_cpu = account.of_try(seconds=1800, outcome="completed", posted=POSTED, gpus=0, queue_wait_s=0.0)
    assert on_cpu["gpu_hours"] == 0.0 and on_cpu["gpu_util_mean"] is None and on_cpu["gpu_util_samples"] == 0


def test_the_runs_total_sums_its_tries_and_an_unknown_wait_stays_unknown(tmp_path):
    def tried(outcome, seconds, wait):
        entry = tries.entry(started=0.0, ended=seconds, outcome=outcome, exit_code=0, launcher="srun", job_id="7",
                            resumed_from=None, saved_now=None, hang=None,
                            account=account.of_try(seconds=seconds, outcome=outcome, posted=POSTED, gpus=4,
                                                   queue_wait_s=wait))  # fmt: skip
        return tries.append(tmp_path, entry)  # checked against the schema on the way in

    history = [tried("preempted", 100.0, 30.0), tried("completed", 200.0, 10.0)]
    summed = tries.goodput(history)["account"]
    assert summed["queue_wait_s"] == 40.0 and summed["gpu_hours"] == pytest.approx(4 * 300 / 3600, abs=1e-6)
    assert summed["buckets"]["disruption_lost_s"] == 20.0 and summed["gpu_util_mean"] == 81.5
    assert sum(summed["buckets"].values()) == pytest.approx(300.0)
    unknown = tries.goodput([*history, tried("completed", 10.0, None)])["account"]
    assert unknown["queue_wait_s"] is None and account.shown(unknown["queue_wait_s"]) == "not known"


def test_an_account_that_breaks_the_schema_is_refused(tmp_path):
    bad = tries.entry(started=0.0, ended=1.0, outcome="completed", exit_code=0, launcher="direct", job_id=None,
                      resumed_from=None, saved_now=None, hang=None, account={"buckets": {}})  # fmt: skip
    with pytest.raises(RunStateError, match="breaks run-tries.schema.json"):
        tries.append(tmp_path, bad)
