"""The one command a remote job runs, on every platform: seed the run directory from the attempt the submitter
staged, then run the run's training as the job's processes run it.

    python -m snakeddp.remote.entry [--variables JSON] [--workdir DIR] [--resume-from DIR] train|launch|steps ARGS
    python CODE/snakeddp/remote/entry.py ...        (a task that runs a file: Databricks' spark_python_task)

``train``: the platform starts every rank itself (AzureML's PyTorch and MPI distributions, the toy queue of
the tests), each running this with ``python -m snakeddp.train`` ARGS; global rank 0 seeds, the others wait
until this job's seeding is done. ``launch``: the platform starts one process (a Databricks job's driver),
which seeds, then starts the ranks with ``python -m snakeddp.launch`` ARGS, as its row's ``ranks_as`` platform
does. ``steps``: the job's one process runs a step of the workflow (``python -m snakeddp.steps`` ARGS: a
Databricks job that ingests a table on its cluster). ``--variables`` are exported first, for a platform whose
request carries no environment; ``--workdir`` is where ARGS' relative paths are read from; ``--resume-from``
is the attempt to resume (checkpoints/, metrics.csv, run-state.json; snakeddp.remote.attempt.stage_resume),
copied into ARGS' ``--run-dir``.

It runs from the code snapshot the submitter staged (snakeddp.remote.folder: this package, without .git),
whose folder goes first on the path of this process and of every interpreter it starts; only the standard
library is imported until then. Nothing from a platform's SDK: the job's environment need not have it.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The folder holding the snakeddp package this runs from (the job's code snapshot, or a checkout's src/).
CODE = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a file: the snapshot's folder on the path instead of this file's own
    _HERE = {os.path.dirname(os.path.abspath(__file__)), str(Path(__file__).resolve().parent)}
    sys.path[:] = [str(CODE), *(entry for entry in sys.path if entry not in _HERE)]

WAIT_S = 1800.0
POLL_S = 2.0
#: What each process of a job runs, by how the platform starts them.
RUNS = {"train": "snakeddp.train", "launch": "snakeddp.launch", "steps": "snakeddp.steps"}


def seed(resume_from: Path, run_dir: Path, token: str) -> None:
    """Copy the staged attempt into the run directory, then mark it seeded by this job (``token``).

    Contents only (no permissions or times): a job's run directory may be a mounted blob folder or volume.
    """
    import shutil

    from snakeddp.run.layout import ATTEMPT_FILES, RunPaths
    from snakeddp.util.fsutil import atomic_write_text

    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ATTEMPT_FILES:
        source = resume_from / name
        files = sorted(source.rglob("*")) if source.is_dir() else [source]
        for path in (p for p in files if p.is_file()):
            target = run_dir / path.relative_to(resume_from)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    atomic_write_text(RunPaths(run_dir).resume_seeded, token)


def wait_for_seed(run_dir: Path, token: str, rank: int, timeout_s: float = WAIT_S) -> None:
    """Block until rank 0 has seeded the run directory for this job: a marker another job left never counts."""
    from snakeddp.run.layout import RunPaths

    marker = RunPaths(run_dir).resume_seeded
    deadline = time.monotonic() + timeout_s
    while not (marker.is_file() and marker.read_text(encoding="utf-8") == token):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rank {rank} waited {timeout_s:.0f} s for rank 0 to copy the resumed attempt into {run_dir}. "
                "HINT: read rank 0's log of this job for the reason."
            )
        time.sleep(POLL_S)


def job_token(env: Mapping[str, str]) -> str:
    """Names this job's seeding: the job id its platform's job side reads (a resubmitted job has another)."""
    from snakeddp import platforms

    return platforms.job_id(env) or "job"


def seeding_rank(runs: str, known: argparse.Namespace, env: Mapping[str, str]) -> int:
    """This process's global rank, as its launcher's variables say (``launch``: the job's one process, 0);
    ``known``: what ``_run_arguments`` read of ARGS."""
    if runs == "launch":
        return 0
    from snakeddp import cluster
    from snakeddp.config.parts import Launch
    from snakeddp.run.runfile import RunFile

    devices = Launch.of(RunFile.load(known.config).config["launch"]).devices
    return cluster.resolve(known.launcher, env, devices=devices)[1].rank


def _run_arguments() -> argparse.ArgumentParser:
    """What this reads of ARGS (snakeddp.train's and snakeddp.launch's own names)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--launcher")
    return parser


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.remote.entry",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--variables", type=json.loads, default={}, help="a JSON object of variables to export")
    parser.add_argument("--workdir", type=Path, help="the folder ARGS' relative paths are read from")
    parser.add_argument("--resume-from", type=Path, help="the staged attempt to resume (read-only)")
    parser.add_argument("runs", choices=sorted(RUNS), help="train: each rank runs this; launch, steps: one does")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the arguments of snakeddp.train or snakeddp.launch")
    args = parser.parse_args(argv)
    return args, args.args[1:] if args.args[:1] == ["--"] else args.args


def main(argv: Sequence[str] | None = None) -> int:
    args, run_argv = parse_args(argv)
    os.environ.update({str(name): str(value) for name, value in args.variables.items()})
    # The ranks (and a Spark driver) are new interpreters: they find the staged package the same way.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(CODE), os.environ.get("PYTHONPATH")) if p)
    if args.workdir is not None:
        os.chdir(args.workdir)
    if args.resume_from is not None:
        known, token = _run_arguments().parse_known_args(run_argv)[0], job_token(os.environ)
        rank = seeding_rank(args.runs, known, os.environ)
        if rank == 0:
            seed(args.resume_from, known.run_dir, token)
        else:
            wait_for_seed(known.run_dir, token, rank)
    # `python -m snakeddp.train|launch ARGS` from here on, in this interpreter, by name: the package never
    # imports its entry points back.
    sys.argv = [RUNS[args.runs], *run_argv]
    runpy.run_module(RUNS[args.runs], run_name="__main__", alter_sys=True)
    return 0  # not reached: both end with SystemExit and their status


if __name__ == "__main__":
    raise SystemExit(main())
