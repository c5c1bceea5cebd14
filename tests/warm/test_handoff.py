"""Where a job's cold interpreter hands its job to the warm process: as early as it can, since whatever it
imports before is paid again in every job (snakeddp.util.handoff)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from snakeddp.util import handoff
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
