"""The ingest step on the slurm platform: a table of two windows or more (snakeddp.data.spread) is read by one
Slurm array job, a task per window, each writing its piece file into the ingestion's folder on the file system
the nodes share (the checkout's, as every job of the profile); the step then assembles the partitions, byte
for byte those of a local ingestion. Any other table is ingested by the step itself.

    python -m snakeddp.slurm.ingest FOLDER    # one array task: the piece SLURM_ARRAY_TASK_ID of FOLDER's work

Each task is handed the dataset's parameters (``work.json`` in that folder) and finds its window as the step
did (spread.prepare: the same table version, windows and feature layout from the same parameters; a table of
categories is scanned for its vocabularies by each task again). It writes its result, or its one-line error,
beside its piece; a TableError read on a node stops the step in the same line as a local ingestion's.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
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


class SlurmIngestError(ConfigError):
    """The array job that reads the table's windows could not be submitted or did not finish."""


def ingest(params: Mapping[str, Any], out_dir: str | Path, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """table.ingest's outputs, read by an array job where the table is spread, else here."""
    read = functools.partial(as_array_job, env=env)
    summary = spread.ingest(params, out_dir, read, "by a Slurm array job")
    return summary if summary is not None else tables.ingest(params, out_dir)


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


def as_array_job(work: spread.Work, pieces: list[spread.Window], env: Mapping[str, str]) -> list[dict[str, Any]]:
    """Each piece read by a task of one array job; their results."""
    folder = Path(work.folder)
    atomic_write_json(folder / WORK, {"params": work.params, "out": str(folder.parent), "pieces": len(pieces)})
    command = sbatch_command(folder, len(pieces), env)
    try:
        done = subprocess.run(command, env=dict(env), capture_output=True, text=True, check=False)
    except OSError as error:
        raise SlurmIngestError(
            f"could not submit the array job that ingests the table ({error}). HINT: run from a node where sbatch "
            "works, or with --profile local."
        ) from None
    say(f"ingest: Slurm array job {done.stdout.strip() or '(not submitted)'}, {len(pieces)} tasks")
    return results(folder, pieces, done)


def results(folder: Path, pieces: Sequence[spread.Window], done: subprocess.CompletedProcess) -> list[dict[str, Any]]:
    """Each task's result; the first task's error (a TableError as it was raised), else why the job failed."""
    found = []
    for piece in pieces:
        error = folder / f"piece-{piece.index:05d}.error"
        if error.is_file():
            raise TableError(error.read_text().strip())
        try:
            found.append(json.loads((folder / f"piece-{piece.index:05d}.json").read_text()))
        except (OSError, ValueError):
            log = folder / f"piece-{piece.index}.log"
            said = (log.read_text().strip().splitlines() or [""])[-1] if log.is_file() else ""
            raise SlurmIngestError(
                f"the Slurm array job that ingests the table did not finish piece {piece.index} (sbatch exited "
                f"{done.returncode}: {(done.stderr.strip() or said or 'no output')[-300:]}). HINT: see "
                f"`sacct -j {done.stdout.strip() or '<job>'}`, then rerun."
            ) from None
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """One array task: its piece read and written, its result (or one-line error) beside it."""
    folder = Path((argv or sys.argv[1:])[0])
    handed = json.loads((folder / WORK).read_text())
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
        (folder / f"piece-{index:05d}.error").write_text(f"{error}\n")
        print(f"snakeddp.slurm.ingest: {error}", file=sys.stderr)
        return 1
    atomic_write_json(folder / f"piece-{index:05d}.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
