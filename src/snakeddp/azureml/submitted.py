"""A submitted job as the submitter tracks it, and its record in ``azureml/submission.json``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from snakeddp.util.fsutil import atomic_write_json, read_json

RECORD_FILE = "submission.json"
COMPLETED = "Completed"


@dataclass(frozen=True)
class SubmittedJob:
    name: str
    url: str | None


@dataclass(frozen=True)
class Outcome:
    """A finished job: AzureML's status (Completed, Failed, Canceled, ...) and its error text, if any."""

    status: str
    error: str | None = None

    @property
    def completed(self) -> bool:
        return self.status == COMPLETED


def record(spec_dir: Path, fresh: bool = False, **fields: Any) -> Path:
    """Write ``fields`` into submission.json (the latest attempt: job, spec hash, status); ``fresh`` starts over."""
    path = spec_dir / RECORD_FILE
    current = read_json(path) if path.is_file() and not fresh else {}
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return atomic_write_json(path, {**current, **fields, "updated_at": now})
