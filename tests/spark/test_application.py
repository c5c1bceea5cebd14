"""The workflow's shared Spark application, in this process on a local[2] master (a JVM, no cluster): the
session started ahead for the runs the workflow expects, and what a run that asks for another gets."""

from __future__ import annotations

import sys

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
    finally:
        app.stop()
