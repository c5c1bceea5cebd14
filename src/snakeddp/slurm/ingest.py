"""The ingest step on the slurm platform: a table of two windows or more (snakeddp.data.spread) is read by one
Slurm array job, a task per window, each writing its piece file into the ingestion's folder on the file system
the nodes share (the checkout's, as every job of the profile); the step then assembles the partitions, byte
for byte those of a local ingestion. Any other table is ingested by the step itself.

    python -m snakeddp.slurm.ingest FOLDER    # one array task: the piece SLURM_ARRAY_TASK_ID of FOLDER's work

Each task is handed the dataset's parameters (``work.json`` in that folder) and finds its window as the step
did (spread.prepare: the same table version, windows and feature layout from the same parameters; a table of
categories is scanned for its vocabularies by each task again). It writes its result, or its one-line error,
beside its piece; a TableError read on a node stops the step in the same line as a local ingestion's. A SIGTERM
to the step (its job cancelled, or at its time limit) cancels the array job and removes the pieces first.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from snakeddp.data import spread
from snakeddp.data import table as tables
from snakeddp.errors import ConfigError, TableError
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.terminal import say

WORK = "work.json"
# Minutes and MB each array task asks for: a window is 2^18 rows and more, read a row group at a time.
TASK_MINUTES = 30
TASK_MEM_MB = 4000
# Seconds between two looks at the folder for pieces read.
POLL_S = 0.5
# scancel's tries before the step gives up on its array job (a second apart).
CANCEL_TRIES = 5
# Seconds one scancel may wait on the controller: three of Slurm's default MessageTimeout (10 s).
SCANCEL_S = 30.0
# What scancel says of a job there is nothing left to cancel of (ended, or long forgotten): not asked again.
ENDED = ("already completing or completed", "Invalid job id")
# Seconds the step waits, once scancel is taken, for the array's tasks to be gone before it removes their folder.
CANCEL_WAIT_S = 20


class SlurmIngestError(ConfigError):
    """The array job that reads the table's windows could not be submitted or did not finish."""


def ingest(params: Mapping[str, Any], out_dir: str | Path, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """table.ingest's outputs, read by an array job where the table is spread, else here."""
    read = functools.partial(as_array_job, env=env)
    with stopped_by_sigterm():
        summary = spread.ingest(params, out_dir, read, "by a Slurm array job")
    return summary if summary is not None else tables.ingest(params, out_dir)


@contextlib.contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM (the step's job cancelled, or at its time limit) raised here as SystemExit, so the array job is
    cancelled and the pieces removed on the way out: by default the step died at once, and its array read on
    into the folder Snakemake removes with train/, or into the rerun's. Later copies are ignored meanwhile."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return

    def stop(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def sbatch_command(folder: Path, pieces: int, env: Mapping[str, str]) -> list[str]:
    """The array job's sbatch: one task per piece, waited for; in the partition of the step's own job."""
    task = f"exec {shlex.quote(sys.executable)} -m snakeddp.slurm.ingest {shlex.quote(str(folder))}"
    command = [
        "sbatch", "--wait", "--parsable", f"--array=0-{pieces - 1}", "--job-name=snakeddp-ingest",
        f"--output={folder / 'piece-%a.log'}", "--ntasks=1", "--cpus-per-task=1", f"--mem={TASK_MEM_MB}",
        f"--time={TASK_MINUTES}", f"--chdir={os.getcwd()}", "--export=ALL", f"--wrap={task}",
    ]  # fmt: skip
    if env.get("SLURM_JOB_PARTITION"):
        command.insert(2, f"--partition={env['SLURM_JOB_PARTITION']}")
    return command


def as_array_job(
    work: spread.Work, pieces: list[spread.Window], done: Callable[[dict[str, Any]], None], env: Mapping[str, str]
) -> None:
    """Each piece read by a task of one array job, handed to ``done`` as soon as its task has written it (the
    folder is looked at every POLL_S while sbatch waits), so the first partitions are published while later
    windows are read. A task's error stops the array (scancel)."""
    folder = Path(work.folder)
    atomic_write_json(folder / WORK, {"params": work.params, "out": work.out, "pieces": len(pieces)})
    try:
        process = subprocess.Popen(
            sbatch_command(folder, len(pieces), env), env=dict(env), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    except OSError as error:
        raise SlurmIngestError(
            f"could not submit the array job that ingests the table ({error}). HINT: run from a node where sbatch "
            "works, or with --profile local."
        ) from None
    job = process.stdout.readline().strip()  # --parsable: the job's id, as soon as it is submitted
    say(f"ingest: Slurm array job {job or '(not submitted)'}, {len(pieces)} tasks")
    handed: set[int] = set()
    try:
        while True:
            ended = process.poll() is not None
            for piece in (p for p in pieces if p.index not in handed):
                found = result_of(folder, piece.index)
                if found is not None:
                    handed.add(piece.index)
                    done(found)
            if ended:
                break
            time.sleep(POLL_S)
        if len(handed) < len(pieces):
            missing = min(p.index for p in pieces if p.index not in handed)
            raise unfinished(folder, missing, job, process.returncode, process.stderr.read())
    except BaseException:
        if job:  # also where sbatch has gone: a SIGTERM to the step's job reaches it too, not the array
            cancel(job, env)
        process.kill()
        process.wait()
        raise


def cancel(job: str, env: Mapping[str, str], tries: int = CANCEL_TRIES) -> None:
    """scancel, asked again while it fails, then waited for until no task of the array is left (at most
    CANCEL_WAIT_S): the pieces' folder is removed on the way out, and a task still being launched then could not
    open its log there and ended FAILED (Slurm's SIG_FAILURE, 53), a stray slurmstepd left behind."""
    why = ""
    for attempt in range(tries):
        try:  # bounded: scancel waits on a controller that does not answer (Slurm's MessageTimeout, per retry)
            done = subprocess.run(
                ["scancel", job], env=dict(env), capture_output=True, text=True, check=False, timeout=SCANCEL_S
            )
        except subprocess.TimeoutExpired:
            why = f"no answer within {SCANCEL_S:.0f} s"
        else:
            if done.returncode == 0 or any(word in done.stderr for word in ENDED):
                _left(job, env)
                return
            said = (done.stderr or done.stdout).strip().splitlines()
            why = said[-1] if said else f"exit status {done.returncode}"
        if attempt < tries - 1:
            time.sleep(1.0)
    say(
        f"ingest: scancel {job} failed {tries} times ({why}), so the array's tasks may still be reading. HINT: "
        f"type `scancel {job}` once the controller answers."
    )


def _left(job: str, env: Mapping[str, str]) -> None:
    """Wait while squeue lists a task of ``job`` (cancelled tasks stay listed while they complete)."""
    deadline = time.monotonic() + CANCEL_WAIT_S
    while (left := deadline - time.monotonic()) > 0:
        try:  # within the wait's bound: squeue itself waits for a controller that does not answer
            listed = subprocess.run(
                ["squeue", "-h", "-j", job, "-o", "%i"], env=dict(env), capture_output=True, text=True, timeout=left
            )
        except subprocess.TimeoutExpired:
            return
        if listed.returncode != 0 or not listed.stdout.strip():
            return
        time.sleep(0.2)


def result_of(folder: Path, index: int) -> dict[str, Any] | None:
    """A task's result once it has written it; its TableError (the line it raised) where it stopped on one."""
    error = folder / f"piece-{index:05d}.error"
    if error.is_file():
        raise TableError(error.read_text(encoding="utf-8").strip())
    try:
        return json.loads((folder / f"piece-{index:05d}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def unfinished(folder: Path, index: int, job: str, code: int | None, stderr: str) -> SlurmIngestError:
    log = folder / f"piece-{index}.log"
    said = (log.read_text(encoding="utf-8").strip().splitlines() or [""])[-1] if log.is_file() else ""
    return SlurmIngestError(
        f"the Slurm array job that ingests the table did not finish piece {index} (sbatch exited {code}: "
        f"{(stderr.strip() or said or 'no output')[-300:]}). HINT: see `sacct -j {job or '<job>'}`, then rerun."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """One array task: its piece read and written, its result (or one-line error) beside it."""
    folder = Path((argv or sys.argv[1:])[0])
    handed = json.loads((folder / WORK).read_text(encoding="utf-8"))
    index = int(os.environ["SLURM_ARRAY_TASK_ID"])
    try:
        prepared = spread.prepare(handed["params"], Path(handed["out"]))
        if prepared is None or len(prepared[1]) != handed["pieces"]:
            raise TableError(
                f"{handed['params']['table']['path']}: the table changed while it was ingested (a task found "
                "other windows than the step). HINT: rerun once the table is no longer being written."
            )
        result = spread.read_piece(prepared[0], prepared[1][index])
    except TableError as error:
        (folder / f"piece-{index:05d}.error").write_text(f"{error}\n", encoding="utf-8")
        print(f"snakeddp.slurm.ingest: {error}", file=sys.stderr)
        return 1
    atomic_write_json(folder / f"piece-{index:05d}.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
