"""The command every process of an AzureML job runs: seed a resumed attempt, then train.

    python -m snakeddp.azureml.entry [--resume-from DIR] -- <python -m snakeddp.train arguments>

AzureML starts this once per process (PyTorch distribution) or under its own mpirun (MPI
distribution), in a fresh output folder. ``--resume-from`` is the previous attempt
(checkpoints/, metrics.csv, run-state.json) that the submitter uploaded: global rank 0 copies it
into ``--run-dir`` before training, every other rank waits until it has, then all of them run
``snakeddp.train`` as ``snakeddp.launch`` would, which resumes from ``checkpoints/last.ckpt``.
Imports nothing from the Azure SDKs: the job's environment does not have them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from snakeddp import cluster, train
from snakeddp.run.layout import ATTEMPT_FILES, RunPaths
from snakeddp.run.runfile import RunFile
from snakeddp.util.fsutil import atomic_write_text

WAIT_S = 1800.0
POLL_S = 2.0


def attempt_token(env: Mapping[str, str]) -> str:
    """Names this job's seeding, so a marker left by another attempt never counts."""
    return env.get("AZUREML_RUN_ID", "local")


def seed(resume_from: Path, run_dir: Path, token: str) -> None:
    """Copy the previous attempt into the run directory, then mark it done (rank 0 only).

    Contents only (no permissions or times): the run directory is a mounted blob folder.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ATTEMPT_FILES:
        source = resume_from / name
        files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
        for path in (p for p in files if p.is_file()):
            target = run_dir / path.relative_to(resume_from)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    atomic_write_text(RunPaths(run_dir).resume_seeded, token)


def wait_for_seed(run_dir: Path, token: str, rank: int, timeout_s: float = WAIT_S) -> None:
    """Block until rank 0 has seeded the run directory of this attempt."""
    marker = RunPaths(run_dir).resume_seeded
    deadline = time.monotonic() + timeout_s
    while not (marker.is_file() and marker.read_text() == token):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rank {rank} waited {timeout_s:.0f} s for rank 0 to copy the resumed attempt into {run_dir}. "
                "HINT: check rank 0's log in the job's user_logs for the reason."
            )
        time.sleep(POLL_S)


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.azureml.entry",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--resume-from", type=Path, help="the previous attempt's files (read-only)")
    parser.add_argument("train_argv", nargs=argparse.REMAINDER, help="-- then the arguments of snakeddp.train")
    args = parser.parse_args(argv)
    train_argv = args.train_argv[1:] if args.train_argv[:1] == ["--"] else args.train_argv
    return args, train_argv


def main(argv: Sequence[str] | None = None) -> int:
    args, train_argv = parse_args(argv)
    if args.resume_from is not None:
        train_args = train.parse_args(train_argv)
        devices = RunFile.load(train_args.config).config["launch"]["devices"]
        _, layout = cluster.resolve(train_args.launcher, os.environ, devices=devices)
        token = attempt_token(os.environ)
        if layout.is_main:
            seed(args.resume_from, train_args.run_dir, token)
        else:
            wait_for_seed(train_args.run_dir, token, layout.rank)
    return train.report_errors(train_argv)


if __name__ == "__main__":
    raise SystemExit(main())
