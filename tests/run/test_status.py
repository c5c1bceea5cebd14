"""status.json (snakeddp.run.status): written whole by one writer at a time, read into `snakeddp status`'s rows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from importlib import resources

import jsonschema
import pytest

from snakeddp.run import status
from snakeddp.run.layout import RunPaths


def test_each_write_keeps_what_the_last_writer_knew_and_says_who_wrote(tmp_path):
    run = tmp_path / "runs" / "lr-0.1"
    run.mkdir(parents=True)
    status.write(run, "starting", writer="launcher", queue_wait_s=12.0)
    status.write(run, "training", writer="rank 0", step=40, total_steps=100, **status.progress(40, 100, 4.0))
    status.ended(run, "hung")
    said = status.read(run)
    assert said["state"] == "hung" and said["writer"] == "launcher" and said["eta_s"] is None
    assert (said["step"], said["percent"], said["queue_wait_s"]) == (40, 40.0, 12.0)
    assert not list(run.glob("*.partial")) and not list(run.glob(".*"))  # written whole, nothing left beside
    schema = json.loads(resources.files("snakeddp.schemas").joinpath("run-status.schema.json").read_text())
    jsonschema.validate(said, schema)


def test_progress_needs_a_total_and_a_pace_for_its_eta():
    assert status.progress(25, 100, 5.0) == {"percent": 25.0, "eta_s": 15.0}
    assert status.progress(25, None, 5.0) == {"percent": None, "eta_s": None}
    assert status.progress(25, 100, None) == {"percent": 25.0, "eta_s": None}


def test_a_damaged_status_reads_as_none_and_an_unknown_state_is_a_bug(tmp_path):
    RunPaths(tmp_path).status.write_text("{half")
    assert status.read(tmp_path) is None
    RunPaths(tmp_path).status.write_text(json.dumps({"format": status.FORMAT, "state": "dancing"}))
    assert status.read(tmp_path) is None
    with pytest.raises(ValueError, match="unknown state"):
        status.write(tmp_path, "dancing")


def test_a_queued_retry_a_platform_answers_for_wins_over_a_finished_try(tmp_path):
    results = tmp_path / "results"
    for run, state in (("a", "training"), ("b", "failed"), ("c", "training")):
        (results / "runs" / run).mkdir(parents=True)
        status.write(results / "runs" / run, state, step=3, total_steps=9, eta_s=65.0, epoch=1, max_epochs=3)
    answers = [
        {"run": "b", "state": "queued", "detail": "slurm job 12 pending (Priority)"},
        {"run": "c", "state": "starting", "detail": "slurm job 13 running"},
        {"run": "d", "state": "queued", "detail": "slurm job 14 pending (Resources)"},
    ]
    rows = status.of_checkout(results, answers)
    assert [(row["run"], row["state"]) for row in rows] == [
        ("a", "training"), ("b", "queued"), ("c", "training"), ("d", "queued")
    ]  # fmt: skip
    assert rows[0]["ETA"] == "1m05s" and rows[0]["step"] == "3/9" and rows[0]["epoch"] == "1/3"
    # A run that has ended waits for nothing: no ETA (the one its last post had is in --json).
    (ended,) = status.of_checkout(results, [], raw=False)[1:2]
    assert ended["state"] == "failed" and ended["ETA"] is None
    text = status.table(rows).splitlines()
    assert text[0].split() == list(status.COLUMNS) and "slurm job 14 pending (Resources)" in text[-1]
    # --json, for a script: the values as numbers (it gave "1m05s", "3/9" and "1m07s ago"), the same runs.
    raw = status.of_checkout(results, answers, now=status.read(results / "runs" / "a")["updated"] + 4, raw=True)
    assert [(row["run"], row["state"]) for row in raw] == [(row["run"], row["state"]) for row in rows]
    assert (raw[0]["eta_s"], raw[0]["step"], raw[0]["total_steps"], raw[0]["epoch"]) == (65.0, 3, 9, 1)
    assert raw[0]["updated_s_ago"] == 4.0 and set(raw[3]) == set(raw[0]) and raw[3]["step"] is None


def test_rank_0s_posts_are_written_off_its_thread_the_latest_last_and_flush_writes_what_is_pending(tmp_path):
    poster = status.Poster(tmp_path)
    for step in range(500):
        poster.post("training", writer="rank 0", step=step)
    poster.flush()  # what the provenance record reads back is the last post, written now
    assert status.read(tmp_path)["step"] == 499
    time.sleep(0.3)  # the thread's write of an earlier post, if one was under way, did not replace it
    assert status.read(tmp_path)["step"] == 499
    assert [path.name for path in tmp_path.iterdir()] == ["status.json"]


def test_a_run_whose_writer_was_killed_says_its_process_is_gone(tmp_path):
    run = tmp_path / "runs" / "base"
    run.mkdir(parents=True)
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    status.write(run, "training", writer="rank 0", step=5)
    said = json.loads(RunPaths(run).status.read_text())
    RunPaths(run).status.write_text(json.dumps({**said, "pid": killed.pid}))
    (row,) = status.of_checkout(tmp_path, [])
    assert row["detail"] == f"rank 0 on {said['host']}", "alive: nothing added"
    killed.kill()
    killed.wait()
    (row,) = status.of_checkout(tmp_path, [])
    assert row["state"] == "training" and row["detail"].endswith(f"; its process (pid {killed.pid}) is gone")


def test_a_failed_run_says_why_in_its_row_with_the_line_its_rank_left(tmp_path):
    """A failed run's detail said only "launcher on vm", though the rank's one line is beside it (failure.txt, or
    refused.txt where the machine refused the ranks)."""
    run = tmp_path / "runs" / "base"
    run.mkdir(parents=True)
    status.write(run, "training", writer="rank 0", step=5)
    status.ended(run, "failed")
    line = "snakeddp.train: model.target 'my.model:Net' cannot be imported (No module named 'my'). HINT: add it"
    RunPaths(run).failure.write_text(f"{line}\n")
    (row,) = status.of_checkout(tmp_path, [])
    assert row["state"] == "failed" and row["detail"] == line, row
    refused = "snakeddp.train: no GPU this process can use. HINT: set launch.accelerator: cpu"
    RunPaths(run).refused.write_text(f"{refused}\n")
    (raw,) = status.of_checkout(tmp_path, [], raw=True)
    assert raw["detail"] == refused, raw
    # A run that is done keeps its writer's word, whatever file an earlier try left.
    status.ended(run, "completed")
    (row,) = status.of_checkout(tmp_path, [])
    assert row["state"] == "done" and row["detail"] == f"launcher on {row['detail'].split(' on ')[1]}", row


def test_a_run_done_short_of_its_steps_says_it_stopped_early_beside_its_100_percent(tmp_path):
    """Early stopping ended it at step 576 of the 9,600 its epochs would take: its row said 576/9600 and 100%."""
    run = tmp_path / "runs" / "base"
    run.mkdir(parents=True)
    status.write(run, "training", writer="rank 0", step=576, total_steps=9600, epoch=18, max_epochs=300)
    status.ended(run, "completed")
    (row,) = status.of_checkout(tmp_path, [])
    assert (row["state"], row["step"], row["%"]) == ("done", "576/9600", 100.0)
    assert row["detail"] == "stopped early, at step 576 of 9600", row
    status.write(run, "training", writer="rank 0", step=9600)
    status.ended(run, "completed")
    (row,) = status.of_checkout(tmp_path, [])
    assert row["detail"].startswith("launcher on "), row


def test_the_launchers_end_reads_status_json_once_so_the_step_it_names_is_the_step_it_keeps(tmp_path, monkeypatch):
    """ended read the file for its detail, then write read it again for the fields it keeps: rank 0's post between
    the two left 'stopped early, at step 576' beside step 600."""
    run = tmp_path / "runs" / "base"
    run.mkdir(parents=True)
    status.write(run, "training", writer="rank 0", step=576, total_steps=9600)
    readings, read = [], status.read

    def read_then_rank_0_posts(run_dir):
        said = read(run_dir)
        readings.append(said)
        # Rank 0's last post lands just after this reading, as it may on any reading.
        RunPaths(run_dir).status.write_text(json.dumps({**said, "step": 600 + len(readings)}))
        return said

    monkeypatch.setattr(status, "read", read_then_rank_0_posts)
    status.ended(run, "completed")
    said = read(run)
    assert len(readings) == 1 and said["state"] == "done"
    assert said["detail"] == f"stopped early, at step {said['step']} of 9600" == "stopped early, at step 576 of 9600"
