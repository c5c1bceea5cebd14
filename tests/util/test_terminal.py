"""Progress lines reach Snakemake's output through its own process, wherever that output goes: a
terminal, a file opened with `>` or with `>>` (under nohup), a pipe, a pseudo-terminal (`script`).
Each target is a real one, written by real processes: tests/terminal_host.py stands in for
Snakemake and its jobs (tests/slurm/test_head_job.py runs it as an sbatch job)."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time

from snakeddp.util import terminal
from snakeddp.util.terminal import CLIENT_TIMEOUT_S, PREFIX, VARIABLE, Relay, remove_stale_relays, say
from tests.helpers import subprocess_env
from tests.terminal_host import check_every_line_once_in_order, host_command


def shell(command: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], env=subprocess_env(), timeout=60, check=True, **kwargs)


def test_a_file_opened_with_truncation_keeps_every_line(tmp_path):
    out = tmp_path / "run.log"
    shell(f"{host_command()} > {shlex.quote(str(out))} 2>&1")
    check_every_line_once_in_order(out.read_text())


def test_a_file_appended_to_under_nohup_keeps_every_line_and_what_it_held(tmp_path):
    out = tmp_path / "run.log"
    out.write_text("an earlier run\n")
    shell(f"nohup {host_command()} >> {shlex.quote(str(out))} 2>&1")
    earlier, rest = out.read_text().split("\n", 1)
    assert earlier == "an earlier run"
    check_every_line_once_in_order(rest)


def test_a_pipe_into_tee_keeps_every_line(tmp_path):
    out = tmp_path / "run.log"
    done = shell(f"{host_command()} 2>&1 | tee {shlex.quote(str(out))}", capture_output=True, text=True)
    check_every_line_once_in_order(out.read_text())
    assert done.stdout == out.read_text()


def test_a_pseudo_terminal_under_script_keeps_every_line(tmp_path):
    typescript = tmp_path / "typescript"
    shell(f"script -qfec {shlex.quote(host_command())} {shlex.quote(str(typescript))}", capture_output=True)
    text = typescript.read_text()
    # script's own header and footer lines frame what the terminal showed.
    shown = "\n".join(line for line in text.splitlines() if not line.startswith("Script "))
    check_every_line_once_in_order(shown)


def test_a_terminal_keeps_every_line():
    """The host's stderr is the terminal itself (a pty's slave end), read from its master end."""
    master, slave = os.openpty()
    host = subprocess.Popen(shlex.split(host_command()), stdout=slave, stderr=slave, env=subprocess_env())
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert host.wait(timeout=60) == 0
    check_every_line_once_in_order(b"".join(chunks).decode())


def test_the_relay_keeps_no_process_alive_and_closes_at_exit(tmp_path):
    """Not closed by the host: its exit handler writes what came and removes the socket."""
    out = tmp_path / "run.log"
    started = time.monotonic()
    shell(f"{host_command('--no-close')} > {shlex.quote(str(out))} 2>&1")
    assert time.monotonic() - started < 30
    check_every_line_once_in_order(out.read_text())


def test_say_writes_the_log_and_hands_the_line_over_before_it_returns(monkeypatch, capsys):
    said: list[str] = []
    relay = Relay(said.append)
    monkeypatch.setenv(VARIABLE, relay.start())
    assert os.stat(os.path.dirname(relay.path)).st_mode & 0o077 == 0, "no other user reaches the socket"
    say("run: epoch 1/2")
    assert said == ["run: epoch 1/2"], "written before say returned"
    relay.close()
    assert not os.path.exists(relay.path)
    say("run: epoch 2/2")  # the relay has gone (Snakemake is ending): the log still has it
    assert said == ["run: epoch 1/2"]
    assert capsys.readouterr().err.splitlines() == ["run: epoch 1/2", "run: epoch 2/2"]


def test_a_job_on_another_host_or_outside_the_workflow_writes_only_its_log(monkeypatch, capsys):
    said: list[str] = []
    relay = Relay(said.append)
    relay.start()
    monkeypatch.setenv(VARIABLE, f"not-{socket.gethostname()}:{relay.path}")
    say("elsewhere")
    monkeypatch.delenv(VARIABLE)
    say("outside")
    relay.close()
    assert said == []
    assert capsys.readouterr().err.splitlines() == ["elsewhere", "outside"]


def test_a_rank_read_by_its_driver_marks_what_it_says_and_the_driver_says_only_those_again(monkeypatch, capsys):
    """A Spark run's rank: its output reaches the driver job line by line (its line server), and the driver,
    beside Snakemake, hands the lines the rank said to the relay and prints every line to its log unmarked."""
    monkeypatch.setenv(VARIABLE, terminal.THROUGH_DRIVER)
    say("run: epoch 1/2")
    print("Lightning's own line", file=sys.stderr)
    rank_output = capsys.readouterr().err.splitlines()
    assert rank_output[1] == "Lightning's own line" and rank_output[0] != "run: epoch 1/2"
    said: list[str] = []
    relay = Relay(said.append)
    monkeypatch.setenv(VARIABLE, relay.start())  # the driver job's environment
    for line in rank_output:
        terminal.passed_on(line)
    relay.close()
    assert said == ["run: epoch 1/2"]
    assert capsys.readouterr().err.splitlines() == ["run: epoch 1/2", "Lightning's own line"]


def test_a_job_stopped_mid_line_holds_the_others_back_only_briefly(monkeypatch):
    said: list[str] = []
    relay = Relay(said.append)
    monkeypatch.setenv(VARIABLE, relay.start())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stopped:
        stopped.connect(relay.path)
        stopped.sendall(b"run: epo")
        started = time.monotonic()
        say("another job's line")
        assert said == ["another job's line"]
        assert time.monotonic() - started < 2 * CLIENT_TIMEOUT_S
    relay.close()


def test_a_relay_left_by_a_killed_snakemake_is_removed_by_the_next_one(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    left = tmp_path / f"{PREFIX}{gone.pid}-abcd1234"
    left.mkdir()
    (left / "terminal").touch()
    alive = tmp_path / f"{PREFIX}{os.getpid()}-efgh5678"
    alive.mkdir()
    assert remove_stale_relays(str(tmp_path)) == [str(left)]
    assert not left.exists() and alive.exists()
