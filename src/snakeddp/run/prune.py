"""``snakeddp prune``: free the disk that earlier attempts' checkpoints take, only when asked.

An earlier attempt (``results/runs/<run>/attempts/<id>/``) keeps its checkpoints until this
command removes them. Per run, the checkpoints of the ``best`` attempts by their best score
(trainer.monitor: the lowest val_loss unless set) and of the ``last`` most recent attempts stay, and so,
whatever ``best`` and ``last`` say, do those of the last finished attempt of a run whose current attempt has not
finished (failed, stopped, still training: ``run.runs.standing_attempt``), the run's only model. The others lose
their checkpoints/ only, and get pruned.json beside their record: which files went, their sizes, when and by which
command. Their provenance.json and metrics.csv stay, so every attempt remains listed and comparable; `snakeddp
verify` reads pruned.json to tell pruned checkpoints from lost ones, and a restore of a pruned attempt trains it
again instead (provenance.lineage).

An unfinished attempt kept there (``run.runs.Unfinished``: no record, no score) is pruned as the ``last`` count says,
by when its last epoch ended; its folder then becomes ``<id>-pruned``, a name ``run.attempt.prepare`` never takes
back: without its last.ckpt there is nothing to resume, and its config's next attempt starts on a clean directory.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from snakeddp.run.layout import AttemptPaths, RunPaths
from snakeddp.run.runs import Run, Unfinished, earlier_attempts, standing_attempt, unfinished_attempts
from snakeddp.util.fsutil import atomic_write_json, tree_size


@dataclass(frozen=True)
class Pruned:
    """The checkpoints/ folder of one earlier attempt that pruning removes (or removed)."""

    attempt: Run | Unfinished
    path: Path
    size: int


def _score(run: Run) -> float:
    best = run.best_score
    if best is None:
        return float("inf")
    return best if run.monitor["mode"] == "min" else -best


def _ended(attempt: Run | Unfinished) -> str:
    return attempt.ended_at if isinstance(attempt, Unfinished) else attempt.provenance["timing"]["finished_at"]


def plan(run_dirs: Sequence[Path], best: int, last: int) -> list[Pruned]:
    """What pruning removes: checkpoints of earlier attempts outside the ``best`` (finished: scored) and ``last`` N
    of each run, and never those of the attempt that stands for a run whose current attempt has not finished (its
    only model)."""
    pruned = []
    for run_dir in run_dirs:
        attempts = earlier_attempts(run_dir)  # oldest first
        every = sorted([*attempts, *unfinished_attempts(run_dir)], key=_ended)
        kept = {a.run_dir for a in sorted(attempts, key=_score)[:best]}
        kept |= {a.run_dir for a in every[len(every) - last :]} if last else set()
        kept |= {standing.run_dir} if (standing := standing_attempt(run_dir, attempts)) is not None else set()
        for attempt in every:
            folder = attempt.paths.checkpoints
            if attempt.run_dir not in kept and folder.is_dir():
                pruned.append(Pruned(attempt, folder, tree_size(folder)))
    return pruned


def prune(run_dirs: Sequence[Path], best: int, last: int, dry_run: bool) -> list[Pruned]:
    """Remove what ``plan`` names (nothing with ``dry_run``) and return it; each attempt's pruned.json, written
    first, says what goes (a removal cut short is then told from a loss too)."""
    pruned = plan(run_dirs, best, last)
    if not dry_run:
        for item in pruned:
            atomic_write_json(item.attempt.paths.pruned, _record(item, f"snakeddp prune --best {best} --last {last}"))
            shutil.rmtree(item.path)
            if isinstance(item.attempt, Unfinished):
                _set_aside(item.attempt.paths)
    return pruned


def _set_aside(paths: AttemptPaths) -> Path:
    """An unfinished attempt's folder, its checkpoints pruned, renamed ``<id>-pruned`` (``-pruned-2``, ...)."""
    folder = paths.folder
    if re.search(r"-pruned(-\d+)?$", folder.name):
        return folder
    return folder.rename(RunPaths(paths.run_dir).unused_attempt(f"{folder.name}-pruned").folder)


def _record(item: Pruned, command: str) -> dict:
    folder = item.attempt.paths.folder
    files = sorted(path for path in item.path.rglob("*") if path.is_file())
    return {
        "pruned_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "removed": [{"path": path.relative_to(folder).as_posix(), "bytes": path.stat().st_size} for path in files],
        "bytes": item.size,
    }
