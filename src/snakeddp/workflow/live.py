"""Runs that train in another invocation right now: refused before this one touches their files.

Snakemake deletes a job's outputs and its log before the job runs (snakemake/jobs.py,
``Job.remove_existing_output``), before any command of ours could refuse. A second invocation
started with ``--nolock`` while a run trains would so delete that run's train log (the epochs it
is writing) or its run.yaml, and only then be refused by the run's attempt lock. So before the
first job (onstart) every run that one of this invocation's jobs writes to is checked for a live
attempt (``run.attempt.is_live``), and the invocation stops in one line before any job starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from snakeddp.errors import RunStateError
from snakeddp.run.attempt import is_live
from snakeddp.run.layout import RunPaths

# The rules whose jobs write into a run's directory or its train log (rules/train.smk, rules/search.smk).
RUN_RULES = frozenset({"run_config", "train", "search_run_config", "search_train"})


def check_no_live_runs(pending: Iterable[tuple[str, dict[str, str]]], run_dir: Callable[[str], Path]) -> None:
    """Refuse when a pending job of RUN_RULES belongs to a run whose attempt lock is held."""
    runs = sorted({wildcards["run"] for rule, wildcards in pending if rule in RUN_RULES})
    live = [run for run in runs if is_live(run_dir(run))]
    if live:
        lock = RunPaths(run_dir(live[0])).lock
        others = f" (and {len(live) - 1} more: {', '.join(live[1:4])}{'...' if len(live) > 4 else ''})"
        raise RunStateError(
            f"run {live[0]}{others if len(live) > 1 else ''} is training in another invocation ({lock} is held), "
            "and this one would delete its run.yaml or log before its jobs start; nothing was run. HINT: wait "
            "for that training to finish and run snakemake again, or give only other runs' targets."
        )
