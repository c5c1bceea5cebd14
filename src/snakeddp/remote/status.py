"""A remote platform's run in status.json while its job is away (snakeddp.run.status): the submitter (the
train job's ``snakeddp.launch``) writes what the platform answers of the job, since rank 0's own posts are
written on the platform's side and come back with the job's run directory when it ends.

``submitted``: the platform took the job (queued, its id); ``said``: a state the platform answered while the
job was followed (queued while it waits for a cluster or a slot, running once it runs); ``ended``: how the
follow ended, the submitter's verdict.
"""

from __future__ import annotations

from pathlib import Path

from snakeddp.run import status


def submitted(run_dir: Path, what: str) -> None:
    """The platform took the job (``what``: "Databricks run 1001"); it waits there until it answers otherwise."""
    status.write(run_dir, "queued", writer="launcher", detail=f"{what} submitted", eta_s=None, account=None)


def said(run_dir: Path, what: str, state: str, waiting: bool) -> None:
    """The platform's answer for the job, in its own words (``state``); ``waiting``: not running yet."""
    status.write(run_dir, "queued" if waiting else "running", writer="launcher", detail=f"{what} {state}")


def ended(run_dir: Path, outcome: str) -> None:
    """The follow's end (run.tries' outcomes), as the submitter judged it: over what came back of the job's own
    status.json (where the platform started the ranks itself, its rank 0's last post says training)."""
    status.ended(run_dir, outcome)
