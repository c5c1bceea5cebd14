"""A submitted job as the AzureML sessions track it, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass

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
