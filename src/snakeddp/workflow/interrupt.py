"""A stopped workflow (Ctrl-C, SIGTERM, SIGHUP): a few lines saying what was kept and that rerunning resumes.

Snakemake reports each job that a stop ended as a failure (a ``RuleException`` with the job's shell command,
"Error in rule", the job's whole log, then "At least one job did not complete successfully"): 150 lines for two
training runs, which read like a crash. Training was stopped on purpose and saved (its last epoch after Ctrl-C,
where it stopped after SIGTERM or SIGHUP, which stop a run as a scheduler's preemption does), so the terminal
leaves those records out (snakemake_logger_plugin_snakeddp reads ``stopped_by``) and ``summary`` says instead what
each unfinished run kept. An interrupted (or failed) attempt's log is moved aside before the next attempt's job
writes the run's log afresh (``keep_unfinished_logs``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from snakeddp.run.layout import RunPaths
from snakeddp.run.tries import newest_checkpoint
from snakeddp.util import relays

#: Every job's shell prefix: Snakemake's own, then a trap that keeps the shell through a SIGHUP until its command
#: ends (bash runs a trap once its foreground child is done). Where a closed terminal hangs up Snakemake's whole
#: process group, the job's shell died of it at once, and Snakemake saw the job end while its launcher was still
#: saving and recording the try. A prefix, not `exec` in the rules: a rule's command text is Snakemake's rerun
#: key, and every run trained before would train again (tests/e2e/test_upgrade.py).
JOB_SHELL_PREFIX = "set -euo pipefail; trap : HUP; "
#: The stops Snakemake's own process received (SIGINT: Ctrl-C; SIGTERM; SIGHUP), in the order they came.
STOPS: list[int] = []
#: How the workflow's last lines name each stop.
NAMED = {signal.SIGINT: "Interrupted (Ctrl-C)", signal.SIGTERM: "Stopped (SIGTERM)", signal.SIGHUP: "Stopped (SIGHUP)"}


def stopped_by() -> int | None:
    """The first stop Snakemake's own process received, if any: its jobs were stopped, not broken."""
    return STOPS[0] if STOPS else None


def watch_ctrl_c() -> None:
    """Note the first SIGINT, then let it act as before (Snakemake's KeyboardInterrupt); the
    terminal (snakemake_logger_plugin_snakeddp) then leaves out Snakemake's account of the jobs it
    stopped. Only the main thread may set signal handlers: elsewhere (Snakemake's API used from a
    thread) nothing changes; nor where SIGINT is ignored (`nohup`, a script's `&`), which Snakemake keeps."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        return

    def noted(signum: int, frame: object) -> None:
        STOPS.append(signum)
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, noted)


def pass_on_to_jobs() -> None:
    """SIGINT and SIGTERM sent to Snakemake's process alone (`kill -INT PID`, a CI runner's or systemd's
    stop) reach its jobs too, as they do when a terminal's Ctrl-C sends them to its whole process group;
    then Snakemake acts on them as before. Its local executor only waits for its jobs (Ctrl-C: it shuts its
    thread pool down; SIGTERM: it finishes them): a train job would go on training. SIGHUP (a closed terminal
    or ssh session) stops the workflow as SIGTERM does. Call after Snakemake's scheduler set its SIGTERM
    handler (onstart), from the main thread (elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for relay, signum in relays.RELAYED.items():
        previous = signal.getsignal(signum)
        if callable(previous):  # ignored (`nohup`, a script's `&`): its jobs ignore it too
            signal.signal(signum, relaying(relay, previous))
            os.environ[relays.RELAYING] = "1"  # jobs that run cold take the relays themselves
    # SIGHUP's default ends Snakemake at once, as a kill -9 does: its lock stays behind (the next run stops on it)
    # and a cold job trains on. Handled as SIGTERM, the jobs stop and record it, and the lock goes. Ignored
    # (`nohup`), it stays ignored.
    stop = signal.getsignal(signal.SIGTERM)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_DFL and callable(stop):
        signal.signal(signal.SIGHUP, stop)


def relaying(relay: int, previous: Callable[[int, object], object]) -> Callable[[int, object], None]:
    def passed_on(signum: int, frame: object) -> None:
        # Noted first: the jobs' ends that the stop brings are told as a stop's (snakemake_logger_plugin_snakeddp).
        if signum != signal.SIGINT:  # noted by watch_ctrl_c (the handler this one passes it on to), if typed
            STOPS.append(signum)
        relay_to_clients(relay)
        previous(signum, frame)

    return passed_on


def relay_to_clients(relay: int) -> int:
    """Send ``relay`` to each process below this one that handles it: a job's client, which passes its
    signal on to the job, or a cold job's top process, which acts on it (snakeddp.util.relays), unless it got
    that signal itself. A process that does not handle it (a job's shell, its ranks) never gets it: a real-time
    signal's default kills. Returns how many got it."""
    sent = 0
    for process in psutil.Process().children(recursive=True):
        try:
            if handles(process.pid, relay):
                os.kill(process.pid, relay)
                sent += 1
        except (OSError, psutil.Error):
            continue  # ended meanwhile
    return sent


def handles(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (the SigCgt mask of /proc/PID/status)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def summary(runs: Iterable[tuple[str, Path]], stop: int = signal.SIGINT) -> list[str]:
    """What a workflow that ``stop`` ended says: that rerunning resumes, and where each run that began
    training and did not finish (``(run id, run directory)``: metrics, no provenance.json) stands."""
    # Ctrl-C keeps a run's last finished epoch; SIGTERM and SIGHUP stop it as a preemption does, saved at the
    # step where the ranks stopped (a config whose preempt_signals leave SIGTERM out keeps its last epoch).
    ctrl_c = stop == signal.SIGINT
    lines = [
        f"{NAMED[stop]}. Nothing is lost: rerun the same command to go on where it stopped "
        f"(finished jobs do not run again; training resumes from its last {'saved epoch' if ctrl_c else 'save'})."
    ]
    for run_id, run_dir in runs:
        paths = RunPaths(run_dir)
        if paths.provenance.is_file() or not paths.metrics.is_file():
            continue
        # Not "N epochs": metrics.csv gets an epoch's row before its checkpoint is written, and a kill
        # can land between the two (only torch could read the epoch back from the checkpoint).
        last = newest_checkpoint(run_dir)
        if last is not None:
            lines.append(
                f"  run {run_id}: {'its last finished epoch is saved' if ctrl_c else 'its last save is'} in {last}"
            )
        else:
            lines.append(f"  run {run_id}: stopped in its first epoch; a rerun starts it again")
    return lines


def keep_unfinished_logs(logs: Iterable[tuple[Path, Path]]) -> list[Path]:
    """Move each ``(log, output)`` pair's log aside when the job that wrote it did not finish (its
    output is missing), as ``<log stem>.<its last write, UTC>.log``: the next attempt's job
    writes the log afresh. Returns where the logs went."""
    kept = []
    for log, output in logs:
        if log.is_file() and not output.exists():
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(log.stat().st_mtime))
            aside = log.with_name(f"{log.stem}.{stamp}{log.suffix}")
            log.rename(aside)
            kept.append(aside)
    return kept
