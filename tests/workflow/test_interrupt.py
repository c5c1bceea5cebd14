"""What a stopped workflow says about each run, the stop it notes, and the logs it keeps (the real Ctrl-C and
SIGHUP are tests/e2e/test_interrupt.py)."""

from __future__ import annotations

import os
import signal

import pytest

from snakeddp.util import relays
from snakeddp.workflow.interrupt import STOPS, keep_unfinished_logs, pass_on_to_jobs, stopped_by, summary


def test_the_summary_names_each_unfinished_run_and_where_it_saved(tmp_path):
    saved, started, finished, untouched = (tmp_path / name for name in ("saved", "started", "finished", "untouched"))
    for run in (saved, started, finished):
        run.mkdir()
        (run / "metrics.csv").write_text("epoch\n0\n")
    (saved / "checkpoints").mkdir()
    (saved / "checkpoints" / "last.ckpt").write_bytes(b"")
    (finished / "provenance.json").write_text("{}")
    lines = summary([("saved", saved), ("started", started), ("finished", finished), ("untouched", untouched)])
    assert lines[0].startswith("Interrupted (Ctrl-C). Nothing is lost: rerun the same command")
    assert lines[1:] == [
        f"  run saved: its last finished epoch is saved in {saved / 'checkpoints' / 'last.ckpt'}",
        "  run started: stopped in its first epoch; a rerun starts it again",
    ]
    # SIGTERM and SIGHUP stop a run as a preemption does: saved where its ranks stopped, mid-epoch.
    for stop, said in ((signal.SIGTERM, "Stopped (SIGTERM)"), (signal.SIGHUP, "Stopped (SIGHUP)")):
        lines = summary([("saved", saved), ("started", started), ("finished", finished)], stop)
        assert lines[0].startswith(f"{said}. Nothing is lost: rerun the same command") and "last save)" in lines[0]
        assert lines[1] == f"  run saved: its last save is in {saved / 'checkpoints' / 'last.ckpt'}", lines


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_sigterm_or_sighup_to_snakemake_is_noted_as_the_stop_and_acted_on_as_before(monkeypatch, signum):
    """This process stands for Snakemake's at onstart, its scheduler's SIGTERM handler set: a SIGTERM, or a
    SIGHUP (a closed terminal), noted as the stop that ended the jobs (the terminal then tells it as a stop), and
    Snakemake's handler acts on either."""
    monkeypatch.delenv(relays.RELAYING, raising=False)  # pass_on_to_jobs sets it: put back as it was
    handlers = {stop: signal.getsignal(stop) for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    acted: list[int] = []
    try:
        signal.signal(signal.SIGTERM, lambda got, frame: acted.append(got))  # the scheduler's exit_gracefully
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        pass_on_to_jobs()
        assert stopped_by() is None
        signal.raise_signal(signum)
        assert (stopped_by(), acted) == (signum, [signum])
    finally:
        for stop, handler in handlers.items():
            signal.signal(stop, handler)
        STOPS.clear()


def test_a_log_whose_job_did_not_finish_moves_aside_with_its_time(tmp_path):
    unfinished, finished = tmp_path / "a.log", tmp_path / "b.log"
    unfinished.write_text("interrupted\n")
    finished.write_text("done\n")
    os.utime(unfinished, (0, 86400))
    (tmp_path / "b.json").write_text("{}")
    kept = keep_unfinished_logs([(unfinished, tmp_path / "a.json"), (finished, tmp_path / "b.json")])
    assert kept == [tmp_path / "a.19700102T000000Z.log"] and kept[0].read_text() == "interrupted\n"
    assert not unfinished.exists() and finished.read_text() == "done\n"
    assert keep_unfinished_logs([(unfinished, tmp_path / "a.json")]) == []
