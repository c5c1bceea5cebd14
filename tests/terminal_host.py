"""A stand-in for Snakemake's process, for the tests of snakeddp.util.terminal wherever its output
goes (tests/util/test_terminal.py, tests/slurm/test_head_job.py): it logs its own lines through one
logging handler on stderr (as Snakemake does), runs jobs that ``say`` lines at the same time, and
says each job finished once it exited; ``check_every_line_once_in_order`` reads what it wrote.

    python tests/terminal_host.py JOBS LINES [--no-close]

Its last line is ``host: last line``; with --no-close it leaves the relay to its exit handler.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from snakeddp.util.terminal import VARIABLE, Relay

JOBS, LINES = 3, 60

JOB = "import sys; from snakeddp.util.terminal import say\nfor i in range({lines}): say(f'job {job}: line {{i}}')"


def main(jobs: int, lines: int, close: bool) -> None:
    log = logging.getLogger("host")
    log.addHandler(logging.StreamHandler(sys.stderr))
    log.setLevel(logging.INFO)
    relay = Relay(log.info)
    os.environ[VARIABLE] = relay.start()
    started = [
        subprocess.Popen(
            [sys.executable, "-c", JOB.format(lines=lines, job=job)],
            stderr=subprocess.DEVNULL,  # the job's log
        )
        for job in range(jobs)
    ]
    for i in range(lines):  # the host's own lines, written while the jobs write theirs
        log.info(f"host: line {i}")
    for job, process in enumerate(started):
        assert process.wait() == 0
        log.info(f"host: job {job} finished")
    if close:
        relay.close()
    log.info("host: last line")


def host_command(*extra: str) -> str:
    """The shell command that runs this host with JOBS jobs of LINES lines each."""
    return shlex.join([sys.executable, str(Path(__file__).resolve()), str(JOBS), str(LINES), *extra])


def check_every_line_once_in_order(text: str) -> None:
    """Every job's and the host's lines, whole, once each and in order; each job's lines before the
    host says it finished; the host's last line last."""
    lines = [line.rstrip("\r") for line in text.splitlines()]
    expected = {f"job {job}: line {i}" for job in range(JOBS) for i in range(LINES)}
    expected |= {f"host: line {i}" for i in range(LINES)} | {f"host: job {job} finished" for job in range(JOBS)}
    assert sorted(lines) == sorted(expected | {"host: last line"}), "lost, cut or repeated lines"
    assert lines[-1] == "host: last line"
    for who in [f"job {job}" for job in range(JOBS)] + ["host"]:
        own = [int(m[1]) for line in lines if (m := re.fullmatch(rf"{who}: line (\d+)", line))]
        assert own == list(range(LINES)), who
    for job in range(JOBS):
        assert lines.index(f"job {job}: line {LINES - 1}") < lines.index(f"host: job {job} finished")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), "--no-close" not in sys.argv)
