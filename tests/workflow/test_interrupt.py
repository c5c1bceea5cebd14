"""What an interrupted workflow says about each run, and the logs it keeps (the real Ctrl-C is
tests/e2e/test_interrupt.py)."""

from __future__ import annotations

import os

from snakeddp.workflow.interrupt import keep_unfinished_logs, summary


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
