"""Bring a job's run directory back into ``results/runs/<run>/``.

The job's copy replaces the local attempt files (checkpoints/, metrics.csv, trace/,
run-state.json), so the local run directory is exactly what the job left, pruned top-k
checkpoints included. provenance.json moves last: when it is there, everything else is too.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from snakeddp.run.layout import ATTEMPT_FILES, RunPaths


def collect(downloaded: Path, run_dir: Path) -> bool:
    """Move the job's files into ``run_dir``; False (and nothing touched) when the job wrote no run state."""
    job, local = RunPaths(downloaded), RunPaths(run_dir)
    if not job.state.is_file():
        return False
    for name in ATTEMPT_FILES:
        source, target = downloaded / name, run_dir / name
        if not source.exists():
            continue
        if source.is_dir():
            old = run_dir / f".{name}.replaced"
            if old.exists():
                shutil.rmtree(old)
            if target.exists():
                target.rename(old)
            source.rename(target)
            if old.exists():
                shutil.rmtree(old)
        else:
            os.replace(source, target)
    if job.provenance.is_file():
        os.replace(job.provenance, local.provenance)
    return True
