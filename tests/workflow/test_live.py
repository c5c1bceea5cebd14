"""An invocation stops before its first job when one of them would touch a run that trains elsewhere."""

import os

import pytest

from snakeddp.errors import RunStateError
from snakeddp.run.attempt import hold_attempt_lock
from snakeddp.workflow.live import check_no_live_runs


def test_a_pending_job_of_a_training_run_stops_the_invocation_in_one_line(tmp_path):
    run_dir = lambda run: tmp_path / "runs" / run  # noqa: E731
    fd = hold_attempt_lock(run_dir("busy"))
    pending = [("train", {"run": "idle"}), ("run_config", {"run": "busy"}), ("report", {})]
    with pytest.raises(RunStateError) as refused:
        check_no_live_runs(pending, run_dir)
    message = str(refused.value)
    assert message.startswith("run busy is training in another invocation") and "idle" not in message
    assert "\n" not in message and message.count("HINT:") == 1
    # Other runs' jobs, and jobs outside a run's directory, go ahead.
    check_no_live_runs([("train", {"run": "idle"}), ("partition", {"run": "busy"})], run_dir)
    os.close(fd)
    check_no_live_runs(pending, run_dir)
    assert not run_dir("idle").exists()
