"""What moves between a run directory and a remote job: the attempt it resumes or continues, staged into
the job's folder, and the files it leaves, moved back in."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from snakeddp.provenance import lineage
from snakeddp.provenance.lineage import Origin
from snakeddp.run import attempt
from snakeddp.run.attempt import CONTINUED, resumable
from snakeddp.run.layout import ATTEMPT_FILES, RunPaths
from snakeddp.util.fsutil import atomic_write_json, link_or_copy


def takeover(run_dir: Path, identity: attempt.Identity) -> lineage.Origin | None:
    """The finished attempt this key's attempt takes over, as launch decides it (read-only)."""
    if attempt.restorable(run_dir, identity.key) or attempt.resumable(run_dir, identity.key):
        return None
    return lineage.find(run_dir, identity)


def stage_resume(run_dir: Path, resume_dir: Path, key: str, continued: Origin | None = None) -> Path | None:
    """Put the attempt to resume into ``resume_dir`` (emptied first); None when there is nothing to resume.

    The attempt is found by launch's rule (``attempt.resumable``): in the run directory, or kept
    under attempts/ when this key's attempt was set aside earlier; else ``continued``, the finished
    attempt of a shorter budget, whose checkpoints the job goes on from as this key's attempt.
    """
    if resume_dir.exists():
        shutil.rmtree(resume_dir)
    last = resumable(run_dir, key)
    if last is None and continued is None:
        return None
    home = last.parent.parent if last is not None else continued.source.folder
    resume_dir.mkdir(parents=True)
    for name in ATTEMPT_FILES if last is not None else CONTINUED:
        source = home / name
        if source.is_dir():
            shutil.copytree(source, resume_dir / name, copy_function=link_or_copy)
        elif source.is_file():
            link_or_copy(source, resume_dir / name)
    if last is None:
        atomic_write_json(RunPaths(resume_dir).state, {"resume_key": key, "epochs_from": continued.epochs})
    return resume_dir


def collect(downloaded: Path, run_dir: Path) -> bool:
    """Move the job's files into ``run_dir``; False (and nothing touched) when the job wrote no run state.

    The job's copy replaces the local attempt files (checkpoints/, metrics.csv, trace/, run-state.json),
    so the run directory is exactly what the job left, pruned top-k checkpoints included.
    provenance.json moves last: when it is there, everything else is too."""
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
