"""A slow rank is named while it is slow, typed as `snakemake --profile profiles/local`: in a 2-process run, the
test stops and continues rank 1 in turns (SIGSTOP, SIGCONT: about half its speed), and within the window and 30 s
(issue 75's 90 s at the default 60 s window) the run's log names it in one line while the run goes on;
provenance.json and the report keep both ranks' scores. With launch.straggler: stop the run ends as a hang does
instead, and the rerun resumes.

Each step sleeps STEP_S in the model, so a step's time is steady on a loaded machine and the slowing is the test's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.checkout import Checkout, local_run_past_first_checkpoint
from tests.helpers import assert_valid_provenance, left_running

pytestmark = pytest.mark.e2e

# Issue 75: a slow rank is named within 90 s of its slowing under the default 60 s launch.straggler_window, the
# window and 30 s. These runs set the least window the config takes, so the same naming comes 50 s sooner, and
# hold it to the same 30 s past the window (tests/cluster/test_pace.py holds the default at 60 s, and the naming
# to at most 12 s past the window).
DEFAULT_WINDOW_S, BOUND_S = 60, 90
WINDOW_S = 10
NAMED_WITHIN_S = WINDOW_S + BOUND_S - DEFAULT_WINDOW_S
STEP_S = 0.02
# Rank 1 writes its pid to RANK_1_PID at its first step: the forked ranks can start in one clock tick, so their
# start times cannot tell which is rank 1.
RANK_1_PID = "rank-1.pid"
SLEEPY = f"""
import os, time
from pathlib import Path

from snakeddp.training.models import MLP


class Sleepy(MLP):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and self.global_step == 0:
            Path({RANK_1_PID!r}).write_text(str(os.getpid()))
        time.sleep({STEP_S})
        return super().training_step(batch, batch_idx)
"""
# 100 steps a rank an epoch, about 3 s; at half speed (5 s an epoch) the rank is named 15-20 s into its slowing,
# 3-4 epochs, at most 8 by NAMED_WITHIN_S. Then the run goes on at full speed past the 20 s its spell takes to end
# (its 10 s score back at the ratio, then 10 s more: pace.SMOOTH_S), with epochs to spare.
CONFIG = {
    "data": {"num_train_files": 2, "num_records_per_train_file": 4000, "num_val_records": 200, "num_features": 8},
    "model": {"target": "sleepy:Sleepy", "kwargs": {"hidden_sizes": [16]}},
    "trainer": {"max_epochs": 16, "batch_size": 20, "early_stopping": {"enabled": False}},
    "launch": {"mem_mb": 1000, "runtime": 10, "devices": 2, "accelerator": "cpu", "straggler_window": WINDOW_S},
}

STOP_EPOCHS = 10  # stopped 3-4 epochs in at half speed, and by the 9th at NAMED_WITHIN_S


class Slowing:
    """Stops and continues a process in turns (half its time stopped) until ``stop``; leaves it running."""

    def __init__(self, pid: int, period_s: float = 0.2) -> None:
        self.pid, self.period_s = pid, period_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._done.is_set():
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(self.period_s / 2)
                os.kill(self.pid, signal.SIGCONT)
                time.sleep(self.period_s / 2)
        except ProcessLookupError:
            pass  # the rank ended

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def start(tmp_path: Path, launch: dict, epochs: int = CONFIG["trainer"]["max_epochs"]) -> tuple:
    checkout = Checkout(tmp_path)
    trainer = {**CONFIG["trainer"], "max_epochs": epochs}
    checkout.write_config({**CONFIG, "trainer": trainer, "launch": {**CONFIG["launch"], **launch}})
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    typed = local_run_past_first_checkpoint(tmp_path, tmp_path / "run.log")
    return checkout, typed, int((tmp_path / RANK_1_PID).read_text())


def wait_for_line(typed, log: Path, text: str, within: float) -> str:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        lines = [line for line in log.read_text().splitlines() if text in line]
        if lines:
            return lines[0]
        assert typed.poll() is None, log.read_text()[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"no line with {text!r} within {within:.0f} s: {log.read_text()[-3000:]}")


def test_a_rank_at_half_speed_is_named_in_one_line_within_90_s_and_the_run_goes_on(tmp_path):
    _, typed, rank_1 = start(tmp_path, {})
    slowing = Slowing(rank_1)
    try:
        line = wait_for_line(typed, tmp_path / "run.log", "is slowed by one rank", NAMED_WITHIN_S)
        named_after = time.monotonic() - slowing.started
    finally:
        slowing.stop()
    assert WINDOW_S <= named_after < NAMED_WITHIN_S, named_after
    where = f"rank 1 on {socket.gethostname()} (cpu, pid {rank_1}) has run at "
    assert line.startswith("snakeddp.train: run base is slowed by one rank: ") and where in line, line
    relative = float(line.split(where)[1].split("x")[0])
    assert 0.2 < relative < 0.7, line
    assert "the run goes on; its node's slow spell is recorded in results/nodes.json. HINT: " in line, line
    assert "(rank 0 on " in line, line
    assert typed.wait(timeout=300) == 0, (tmp_path / "run.log").read_text()[-3000:]
    output = (tmp_path / "run.log").read_text()
    assert output.count("is slowed by one rank") == 1, "one line, once"
    assert "Traceback" not in output
    # It went on: epochs after the line, every epoch once.
    after = output.split(line, 1)[1]
    assert "base: epoch " in after, output[-3000:]
    run_dir = tmp_path / "results/runs/base"
    epochs = [int(row.split(",")[0]) for row in (run_dir / "metrics.csv").read_text().splitlines()[1:]]
    assert epochs == list(range(CONFIG["trainer"]["max_epochs"]))
    assert_valid_provenance(tmp_path / "results")  # the scores as provenance.schema.json defines them
    ranks = json.loads((run_dir / "provenance.json").read_text())["launch"]["ranks"]
    slow, fast = ranks[1]["pace"], ranks[0]["pace"]
    assert ranks[1]["pid"] == rank_1
    assert slow["lowest_relative"] < 0.7 <= fast["lowest_relative"] and fast["relative"] == 1.0 > slow["relative"]
    ((spell,),) = [slow["slow_spells"]]
    assert spell["until"] is not None and spell["seconds"] >= WINDOW_S and fast["slow_spells"] == []
    # The checkout's ledger of nodes keeps the spell (snakeddp.run.ledger), once.
    events = json.loads((tmp_path / "results/nodes.json").read_text())["nodes"][socket.gethostname()]
    assert [(e["kind"], e["run"], e["at"]) for e in events] == [("slow", "base", spell["since"])]
    graph = json.loads((tmp_path / "results/report/ro-crate-metadata.json").read_text())["@graph"]
    kept = {entity["@id"]: entity for entity in graph}
    assert kept["#base-rank-1-pace"]["value"] == slow["relative"] and kept["#base-rank-0-pace"]["value"] == 1.0
    assert f"slow from {spell['since']} to {spell['until']}" in kept["#base-rank-1-pace"]["description"]
    page = (tmp_path / "results/report/report.html").read_text()
    assert (
        f"{slow['relative']:.2f}x the fastest (lowest {slow['lowest_relative']:.2f}); slow from {spell['since']}"
        in page
    )


def test_with_straggler_stop_the_run_ends_as_a_hang_does_and_the_rerun_resumes(tmp_path):
    checkout, typed, rank_1 = start(tmp_path, {"straggler": "stop"}, epochs=STOP_EPOCHS)
    slowing = Slowing(rank_1)
    try:
        assert typed.wait(timeout=120) == 1, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        slowing.stop()
    output = (tmp_path / "run.log").read_text()
    lines = [line for line in output.splitlines() if "stopped for a slow rank" in line]
    assert len(lines) == 1, output[-3000:]
    assert f"rank 1 on {socket.gethostname()} (cpu, pid {rank_1})" in lines[0] and "HINT: " in lines[0]
    assert "Traceback" not in output
    assert not left_running(tmp_path, within=10)
    rerun = checkout.snakemake("--profile", "profiles/local")
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    run_dir = tmp_path / "results/runs/base"
    assert_valid_provenance(tmp_path / "results")
    record = json.loads((run_dir / "provenance.json").read_text())
    stopped, completed = record["attempt"]["tries"]
    assert stopped["outcome"] == "hung" and stopped["hang"]["kind"] == "slow"
    assert stopped["hang"]["culprit"]["rank"] == 1 and stopped["hang"]["culprit"]["pid"] == rank_1
    assert stopped["hang"]["relative"] < 0.7 and stopped["hang"]["line"] == lines[0]
    assert completed["outcome"] == "completed" and completed["resumed_from_step"] == stopped["kept_step"] > 0
    epochs = [int(row.split(",")[0]) for row in (run_dir / "metrics.csv").read_text().splitlines()[1:]]
    assert epochs == list(range(STOP_EPOCHS)), "every epoch once"
    page = (tmp_path / "results/report/report.html").read_text()
    said = f"rank 1 on {socket.gethostname()} (pid {rank_1}) slow, at {stopped['hang']['relative']:.2f}x the fastest"
    assert said in page and "stopped (launch.straggler: stop) at step" in page
