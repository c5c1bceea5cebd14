"""`snakeddp warm`: one warm process kept across local invocations (snakeddp.warm.kept). An invocation whose
environment has its export line forks its jobs from it and starts none of its own; one whose jobs it could not fork
(another import path) starts its own; SNAKEDDP_WARM_START=0 still starts every job cold; outside a checkout it
refuses in one line, and in the checkout's root, as its HINT says, it prints the line and keeps the process
until Ctrl-C."""

from __future__ import annotations

import copy
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from snakeddp.util import handoff
from snakeddp.warm import kept
from snakeddp.warm.admission import startup_env
from tests import workflow_venv
from tests.helpers import REPO, TINY, Workflow, subprocess_env

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kept_warm")]


def trained(tmp_path: Path, **env: str) -> tuple[dict, str]:
    """The tiny config's pipeline with ``env`` added: its run's launch record, and what it printed."""
    workflow = Workflow(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    workflow.write_config(copy.deepcopy(TINY))
    done = workflow.run("--cores", "2", env=subprocess_env(**env))
    (record,) = (tmp_path / "results" / "runs").glob("*/provenance.json")
    return json.loads(record.read_text())["launch"], done.stdout + done.stderr


def test_an_invocation_forks_its_jobs_from_the_kept_warm_process(tmp_path, kept_warm):
    said = kept_warm.log.read_text()  # the session's process: what earlier files' invocations made it say
    launch, printed = trained(tmp_path)
    assert (launch["job_start"], launch["rank_start"]) == ("warm", "warm"), printed
    assert "start cold" not in printed and "starts cold" not in kept_warm.log.read_text().removeprefix(said)
    assert Path(kept_warm.socket).exists(), "the invocation leaves the kept process running"


def test_an_invocation_whose_jobs_it_could_not_fork_starts_its_own_warm_process(tmp_path, kept_warm):
    """Another import path (another checkout's src/, a PYTHONPATH of the user's): the kept process would
    decline every job, so the invocation starts its own and its jobs start warm; the kept one is never asked
    (it would say so on its terminal)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    said = kept_warm.log.read_text()
    launch, printed = trained(tmp_path / "run", PYTHONPATH=f"{REPO / 'src'}:{elsewhere}")
    assert (launch["job_start"], launch["rank_start"]) == ("warm", "warm"), printed
    assert kept_warm.log.read_text() == said


def test_jobs_start_cold_with_warm_starts_off_though_a_kept_process_is_named(tmp_path, kept_warm):
    said = kept_warm.log.read_text()
    launch, printed = trained(tmp_path, SNAKEDDP_WARM_START="0")
    assert (launch["job_start"], launch["rank_start"]) == ("cold", "cold"), printed
    assert kept_warm.log.read_text() == said, "no job asked the kept process"


def test_outside_a_checkout_it_refuses_in_one_line_and_in_the_checkouts_root_it_keeps_one(tmp_path):
    env = {k: v for k, v in subprocess_env().items() if k != handoff.SOCKET}
    refused = subprocess.run(
        [workflow_venv.snakeddp(), "warm"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout + refused.stderr
    (line,) = refused.stderr.splitlines()
    assert (
        line.startswith("snakeddp warm: no Snakefile in") and "HINT: run snakeddp warm in the checkout's root" in line
    )
    # As the HINT says: in the checkout's root, it prints the export line and keeps its process until Ctrl-C.
    kept = subprocess.Popen([workflow_venv.snakeddp(), "warm"], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        export = kept.stdout.readline() if kept.stdout else ""
        assert export.startswith(f"export {handoff.SOCKET}="), export
        socket_path = Path(shlex.split(export.partition("=")[2])[0])
        assert socket_path.exists() and kept.poll() is None
    finally:
        kept.send_signal(signal.SIGINT)
        assert kept.wait(timeout=60) == 0
    assert not socket_path.parent.exists()


def test_a_socket_whose_process_is_gone_or_another_interpreters_is_not_named(tmp_path):
    """What `snakeddp warm` leaves when it is killed (its directory, its socket) names no process: the
    invocation starts its own rather than hand every job to nothing."""
    folder = tmp_path / "snakeddp-warm-1-x"
    folder.mkdir(mode=0o700)
    path = str(folder / "warm")
    env = {**subprocess_env(), handoff.SOCKET: path}
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        for pid, executable, named in (
            (os.getpid(), sys.executable, path),
            (int(gone.stdout), sys.executable, None),
            (os.getpid(), "/usr/bin/true", None),
        ):
            serves = {"executable": executable, "startup_env": startup_env(env), "pid": pid}
            (folder / kept.SERVES).write_text(json.dumps(serves))
            assert kept.named(env) == named, serves
