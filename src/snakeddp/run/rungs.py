"""A search's decisions as files (results/search/rung-<k>.json) and what they say of the runs: which it stopped,
at which rung. Read by snakeddp.run.search, which writes them, and by the readers of runs (snakeddp.run.runs), which
a search's own module imports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snakeddp.errors import ProvenanceError
from snakeddp.util.fsutil import read_json

# Under results/: each run's rung configs and records, and each rung's decision (rules/search.smk).
SEARCH_DIR = "search"
DECISION_GLOB = "rung-*.json"
# The record of one rung's decision (results/search/rung-<k>.json): what was ranked, by what.
DECISION_VERSION = 1


def read_decision(path: str | Path) -> dict[str, Any]:
    """A rung's decision as written by ``write_decision``, checked for the fields the workflow reads."""
    decision = read_json(Path(path))
    entries = decision.get("configurations") if isinstance(decision, dict) else None
    if (
        not isinstance(entries, list)
        or decision.get("version") != DECISION_VERSION
        or not all(
            isinstance(e, dict) and isinstance(e.get("id"), str) and isinstance(e.get("promoted"), bool)
            for e in entries
        )
    ):
        raise ProvenanceError(
            f"{path} is not a search decision snakeddp wrote. HINT: delete it; the next `snakemake` run decides "
            "that rung again from the runs' records, without training."
        )
    return decision


def stopped(results: str | Path) -> dict[str, dict[str, Any]]:
    """Runs a search under ``results`` stopped before its last rung: run id -> the rung it reached,
    that rung's epochs, its configuration and the configuration's rank there (no search: none)."""
    found: dict[str, dict[str, Any]] = {}
    decisions = sorted(
        (read_decision(path) for path in (Path(results) / SEARCH_DIR).glob(DECISION_GLOB)), key=lambda d: d["rung"]
    )
    top = decisions[-1]["rung"] if decisions else None
    for decision in decisions:
        for entry in decision["configurations"]:
            for rid in entry["runs"]:
                found.pop(rid, None)
                if not entry["promoted"] and decision["rung"] != top:
                    found[rid] = {"rung": decision["rung"], "epochs": decision["epochs"], "configuration": entry["id"],
                                  "rank": entry["rank"]}  # fmt: skip
    return found
