"""Where a job's cold interpreter hands its job to the warm process: as early as it can, since whatever it
imports before is paid again in every job (snakeddp.util.handoff); and which of a job's processes take
Snakemake's relays (snakeddp.util.relays)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from snakeddp.util import handoff, relays
from snakeddp.workflow import interrupt
from tests.helpers import subprocess_env


def test_a_supervisor_job_is_handed_off_before_its_package_imports_the_launchers(tmp_path: Path) -> None:
    # A stand-in warm process: it takes the request, notes what the job had imported by then, and answers
    # nothing, so the job runs cold (as after a refusal); it listens for no second request.
    address = tmp_path / "warm.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(address))
    listener.listen(1)
    listener.settimeout(120)
    stderr = tmp_path / "stderr"
    command = [sys.executable, "-X", "importtime", "-m", "snakeddp.cluster.supervisor", "--help"]
    with open(stderr, "wb") as err:
        process = subprocess.Popen(
            command, env=subprocess_env(**{handoff.SOCKET: str(address)}), stdout=subprocess.PIPE, stderr=err
        )
    try:
        conn, _ = listener.accept()
        listener.close()
        conn.settimeout(120)
        request, fds = handoff.receive(conn, max_fds=len(handoff.DESCRIPTORS))
        imported = {line.split("|")[-1].strip() for line in stderr.read_text().splitlines() if "|" in line}
        for fd in fds:
            os.close(fd)
        conn.close()
        out, _ = process.communicate(timeout=120)
    finally:
        process.kill()
    assert request is not None and request["module"] == "snakeddp.cluster.supervisor"
    assert request["argv"] == ["--help"]
    # The launchers' imports (the platforms' registry, jsonschema through the config) came after the request.
    assert "snakeddp.util.handoff" in imported
    assert not {"snakeddp.cluster.base", "snakeddp.platforms", "jsonschema"} & imported, sorted(imported)
    # Run cold, it is asked for once: the supervisor's own first line does not ask again.
    assert process.returncode == 0, stderr.read_text()[-2000:]
    assert b"--nproc-per-node" in out
    assert "did not answer" not in stderr.read_text()


def test_a_supervisor_forked_or_cold_takes_none_of_snakemakes_relays(tmp_path: Path) -> None:
    """Snakemake's process relays a stop it got alone to every process below it that handles the relay
    (snakeddp.util.relays). A supervisor's launcher passes every signal on to it (snakeddp.launch), so the
    supervisor takes none, forked (its client) or cold: its ranks would get the stop twice."""
    address = tmp_path / "warm.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(address))
    listener.listen(1)
    listener.settimeout(120)
    ranks = [sys.executable, "-c", "import time; time.sleep(60)"]
    command = [sys.executable, "-m", "snakeddp.cluster.supervisor", "--nproc-per-node=1", "--", *ranks]
    forked = subprocess.Popen(command, env=subprocess_env(**{handoff.SOCKET: str(address), relays.RELAYING: "1"}))
    cold = subprocess.Popen(command, env=subprocess_env(**{relays.RELAYING: "1"}))
    # A stand-in warm process: it answers the forked one's request with a process of its own as the job.
    stand_in = subprocess.Popen(ranks)
    try:
        conn, _ = listener.accept()
        listener.close()
        conn.settimeout(120)
        request, fds = handoff.receive(conn, max_fds=len(handoff.DESCRIPTORS))
        assert request is not None and request["module"] == "snakeddp.cluster.supervisor"
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(stand_in.pid)
        handoff.send(conn, {"pid": stand_in.pid}, [pidfd])
        os.close(pidfd)
        for process in (forked, cold):
            # Its handlers are set once it passes SIGTERM on (the client's wait_for, the supervisor's main).
            deadline = time.monotonic() + 60
            while not interrupt.handles(process.pid, signal.SIGTERM):
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            assert not any(interrupt.handles(process.pid, relay) for relay in relays.RELAYED)
        handoff.send(conn, {"status": 0})
        assert forked.wait(timeout=60) == 0
        conn.close()
    finally:
        cold.terminate()  # passed on to its rank
        for process in (forked, stand_in):
            process.kill()
        for process in (forked, cold, stand_in):
            process.wait(timeout=60)
