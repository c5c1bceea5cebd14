"""What a stopped workflow says about each run, the stop it notes, and the logs it keeps (the real Ctrl-C and
SIGHUP are tests/e2e/test_interrupt.py)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from snakeddp.util import relays
from snakeddp.workflow.interrupt import (
    JOB_SHELL_PREFIX,
    STOPS,
    keep_unfinished_logs,
    pass_on_to_jobs,
    stopped_by,
    summary,
    watch_ctrl_c,
)


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


def test_an_ignored_ctrl_c_stays_ignored(monkeypatch):
    """Snakemake started with SIGINT ignored (`nohup`, a script's `&`) keeps it so: the watch of Ctrl-C does not make
    a `kill -INT` stop what its user meant to run on."""
    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        watch_ctrl_c()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)
        assert stopped_by() is None
    finally:
        signal.signal(signal.SIGINT, previous)
        STOPS.clear()


# A job's command that takes SIGHUP as a stop (as the launcher does): it saves until the test lets it finish (argv[2]
# exists), then exits 75.
SAVES_ON_HANGUP = """
import pathlib, signal, sys, time
def stop(signum, frame):
    saved, done = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    saved.write_text("saving")
    while not done.exists():
        time.sleep(0.05)
    saved.write_text("saved")
    sys.exit(75)
signal.signal(signal.SIGHUP, stop)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_jobs_shell_waits_through_its_groups_hangup_for_the_command_and_ends_with_its_status(tmp_path):
    """A closed terminal hangs up Snakemake's whole process group, each job's shell with it (Snakemake runs a
    job's command as `bash -c PREFIX COMMAND`, the train rule's with its output sent to its log, which keeps bash
    from exec'ing it): the shell outlives the hang-up until its command ends, so Snakemake sees the job end once
    the launcher saved and recorded the try, and with its status."""
    saved, done, log = tmp_path / "saved", tmp_path / "done", tmp_path / "job.log"
    command = f"{sys.executable} -c {shlex.quote(SAVES_ON_HANGUP)} {saved} {done} > {log} 2>&1"
    shell = subprocess.Popen(["bash", "-c", JOB_SHELL_PREFIX + command], start_new_session=True)
    deadline = time.monotonic() + 30
    while not (log.is_file() and log.read_text() == "ready\n"):
        assert shell.poll() is None and time.monotonic() < deadline, log.read_text() if log.is_file() else ""
        time.sleep(0.05)
    os.killpg(shell.pid, signal.SIGHUP)
    # The command saves until it is let finish: a save of a second could end before the look below on a loaded
    # machine, and the shell with it, which would read as a shell that died of the hang-up.
    deadline = time.monotonic() + 30
    while not saved.is_file():
        assert shell.poll() is None and time.monotonic() < deadline, "the command never took the hang-up"
        time.sleep(0.05)
    time.sleep(0.5)
    assert shell.poll() is None, "the job's shell died of the hang-up while its command was saving"
    done.touch()
    assert shell.wait(timeout=30) == 75
    assert saved.read_text() == "saved"


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
