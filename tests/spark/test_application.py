"""The workflow's shared Spark application, in this process on a local[2] master (a JVM, no cluster): the
session started ahead for the runs the workflow expects, and what a run that asks for another gets."""

from __future__ import annotations

import socket
import sys
import threading

import pytest

from snakeddp.spark import application, sharing
from snakeddp.spark.settings import Settings

pytestmark = pytest.mark.e2e


def hello(threads: int) -> dict:
    return sharing.hello(Settings.of({"master": "local[2]", "conf": {}}), 2, threads, False)


def test_an_expected_session_no_run_used_gives_way_to_the_first_runs_and_then_declines_others(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    app = application.Application(tmp_path / "scratch", slots=2, first=2)
    try:
        app.expect(hello(threads=1))
        expected = app.described["id"]
        log = capsys.readouterr().err
        assert f"session {expected} started in" in log and "before any run asked" in log
        assert "the executors' Python started in" in log
        # The first run asks for 2 cores per rank: not declined (no run used the expected session), but a
        # session of its own settings replaces it.
        first = app.open(hello(threads=2))
        assert first["application"]["id"] != expected and app.threads == 2
        assert "other Spark settings, task cores or GPUs than expected" in capsys.readouterr().err
        # From then on the session is the runs': one that asks for another goes alone, as before.
        assert app.open(hello(threads=2)) == first
        assert "declined" in app.open(hello(threads=1))
        # 2 cores a rank on local[2]: one slot. A run that finds it held is told why it waits, once, and starts
        # when the run holding it ends.
        said: list[str] = []
        with application._Slots(app, 1):
            waiting = threading.Thread(target=lambda: application._Slots(app, 1, waits=said.append).__enter__())
            waiting.start()
            waiting.join(1.0)
            assert waiting.is_alive() and said == [
                "the other runs hold 1 of its 1 task slots; this run starts once they leave it 1 slot"
            ]
        waiting.join(5.0)
        assert not waiting.is_alive() and app.used == 1 and len(said) == 1
        app.used = 0
        # A run stopped while it waited (Ctrl-C wrote its stop file) starts no stage when its turn comes.
        (tmp_path / "stop").write_text("SIGINT")
        driver, ours = socket.socketpair()
        with driver, ours:
            request = {"stop_file": str(tmp_path / "stop"), "group": str(tmp_path / "run")}
            assert app.in_turn(ours, request, application._Slots(app, 1)) is None
        assert app.used == 0 and "run run: starting" not in capsys.readouterr().err
    finally:
        app.stop()
