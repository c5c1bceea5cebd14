"""The report's view of a search (search: in the config): each configuration's last rung, its mean
score at every rung, the winner, and the epochs the search trained against the whole grid's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from snakeddp.report.table import Rows, write_csv
from snakeddp.run import search


def view(decisions: Sequence[Mapping[str, Any]], max_epochs: int) -> dict[str, Any]:
    """What the page shows of the search whose rung decisions are ``decisions``."""
    ordered = sorted(decisions, key=lambda d: d["rung"])
    rows = search.outcome(ordered)
    runs = sum(row["seeds"] for row in rows)
    spent = search.epochs_trained(ordered)
    return {
        "metric": ordered[0]["metric"],
        "mode": ordered[0]["mode"],
        "eta": ordered[0]["eta"],
        "budgets": [d["epochs"] for d in ordered],
        "rows": rows,
        "winner": next((row["id"] for row in rows if row["winner"]), None),
        "epochs": {"search": spent, "grid": runs * max_epochs},
    }


def write_table(shown: Mapping[str, Any], out: str | Path) -> Rows:
    """search.csv: one row per configuration, best first, with its mean score at each rung's budget."""
    budgets = shown["budgets"]
    header = ["configuration", "seeds", "last_rung", "epochs", "rank", "winner"]
    header += [f"{shown['metric']}_at_{budget}_epochs" for budget in budgets]
    rows = [
        [row["id"], row["seeds"], row["rung"], row["epochs"], row["rank"], row["winner"]]
        + [row["scores"].get(budget) for budget in budgets]
        for row in shown["rows"]
    ]
    return write_csv(Rows(header, rows), out)
