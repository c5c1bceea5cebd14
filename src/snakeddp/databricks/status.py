"""What Databricks answers about a submitted run while its train job follows it (its Jobs API's Run, polled by
the SDK's wait): its life cycle state as snakeddp's (snakeddp.remote.status), written to the run's status.json
with every poll, so that `snakeddp status` shows a run queued for a cluster apart from one running there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from snakeddp.remote import status as remote_status

# Life cycle states (databricks.sdk.service.jobs.RunLifeCycleState) of a run that does not run yet.
WAITING = ("QUEUED", "PENDING", "BLOCKED", "WAITING_FOR_RETRY")


def state_of(run: Any) -> tuple[str, bool]:
    """The run's life cycle state as Databricks names it, and whether it still waits to run."""
    life = run.state.life_cycle_state if run.state else None
    name = getattr(life, "value", None) or "UNKNOWN"
    return name, name in WAITING


def follow(run_dir: Path, what: str) -> Callable[[Any], None]:
    """The SDK wait's callback: each polled Run's state into status.json."""

    def polled(run: Any) -> None:
        state, waiting = state_of(run)
        remote_status.said(run_dir, what, state, waiting)

    return polled
