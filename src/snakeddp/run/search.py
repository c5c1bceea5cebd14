"""Successive halving over a sweep's configurations, decided by pure functions of the config and
the metrics the rungs recorded.

A configuration is a sweep point without its seed (its runs differ only in ``seed``). Rung k trains
every surviving configuration to ``min_epochs x eta^k`` epochs (the last rung to
``trainer.max_epochs``), each run continuing from its previous rung's checkpoint, and promotes the
best ``1/eta`` of them, ranked by the mean over seeds of the monitored metric's best value so far.
Nothing depends on which run finished first, or on the order the sweep lists its values: ties and
missing scores are broken by the configuration's id. Asynchronous schedulers (ASHA) decide by
arrival order and do not rerun the same; this one reruns bit for bit and resumes at any rung.

The workflow (rules/search.smk) makes one ``checkpoint`` per rung from these functions, so the whole
search stays one Snakemake DAG on every profile.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snakeddp.config import parts, run_id
from snakeddp.errors import ConfigError, ProvenanceError
from snakeddp.run.rungs import DECISION_VERSION
from snakeddp.run.runs import Run
from snakeddp.util.fsutil import atomic_write_json

SUCCESSIVE_HALVING = "successive_halving"


@dataclass(frozen=True)
class Plan:
    """What a search does, before any metric: its rungs' budgets and what it ranks by."""

    eta: int
    budgets: tuple[int, ...]
    metric: str
    mode: str

    @property
    def rungs(self) -> range:
        return range(len(self.budgets))

    @property
    def top(self) -> int:
        """The last rung, which trains to trainer.max_epochs."""
        return len(self.budgets) - 1


def budgets(min_epochs: int, eta: int, max_epochs: int) -> tuple[int, ...]:
    """Each rung's epochs: min_epochs, min_epochs x eta, ... below max_epochs, then max_epochs."""
    found: list[int] = []
    budget = min_epochs
    while budget < max_epochs:
        found.append(budget)
        budget *= eta
    return (*found, max_epochs)


def plan(cfg: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]) -> Plan | None:
    """The search of a validated config over its expanded runs, or None without ``search:``."""
    search = cfg.get("search")
    if not search:
        return None
    swept = set(cfg.get("sweep") or {})
    if "trainer.max_epochs" in swept:
        raise ConfigError(
            "search: trainer.max_epochs is swept, but it is the search's top budget. HINT: remove "
            "trainer.max_epochs from sweep: and set it once; search.min_epochs sets the first rung's budget."
        )
    trainers = [parts.Trainer.of(r["config"]["trainer"]) for r in runs.values()]
    monitors = {trainer.monitor.metric for trainer in trainers}
    max_epochs = {trainer.max_epochs for trainer in trainers}.pop()
    if search["min_epochs"] > max_epochs:
        raise ConfigError(
            f"search.min_epochs={search['min_epochs']} is more than trainer.max_epochs={max_epochs}, so no rung "
            "would stop anything. HINT: lower search.min_epochs or raise trainer.max_epochs."
        )
    default = trainers[0].monitor
    if search.get("metric") is None and len(monitors) > 1:
        raise ConfigError(
            "search: the swept runs monitor different metrics, so their scores do not compare. HINT: set "
            "search.metric and search.mode, or sweep everything but trainer.monitor."
        )
    return Plan(
        eta=search["eta"],
        budgets=budgets(search["min_epochs"], search["eta"], max_epochs),
        metric=search.get("metric") or default.metric,
        mode=search.get("mode") or default.mode,
    )


def configuration_id(point: Mapping[str, Any]) -> str:
    """A sweep point's configuration: its run id without the seed."""
    return run_id({key: value for key, value in point.items() if key != "seed"})


def configurations(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Configuration id -> the ids of its runs (one per seed), both sorted."""
    grouped: dict[str, list[str]] = {}
    for rid, run in runs.items():
        grouped.setdefault(configuration_id(run["point"]), []).append(rid)
    return {cid: sorted(grouped[cid]) for cid in sorted(grouped)}


def _mean(scores: Sequence[float | None]) -> float | None:
    """The mean over seeds; None (ranked last) when a seed has no score or one is not finite."""
    if not scores or any(s is None or not math.isfinite(s) for s in scores):
        return None
    return sum(scores) / len(scores)


def rank(scores: Mapping[str, Sequence[float | None]], mode: str) -> list[str]:
    """Configuration ids best first: by mean score (mode min or max), no score last, ties by id."""

    def order(cid: str) -> tuple[bool, float, str]:
        mean = _mean(scores[cid])
        if mean is None:
            return (True, 0.0, cid)
        return (False, mean if mode == "min" else -mean, cid)

    return sorted(scores, key=order)


def promoted_count(count: int, eta: int) -> int:
    """How many of ``count`` configurations go on to the next rung: the best 1/eta, at least one."""
    return max(1, count // eta)


def decide(
    plan: Plan,
    rung: int,
    groups: Mapping[str, Sequence[str]],
    scores: Mapping[str, float | None],
    epochs: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Rung ``rung``'s decision over the configurations it trained (``groups``: id -> runs) from
    each run's score at that rung's budget (``epochs``: how many each run trained, early stopping
    may end one before the budget)."""
    by_config = {cid: [scores[rid] for rid in runs] for cid, runs in groups.items()}
    ranked = rank(by_config, plan.mode)
    keep = len(ranked) if rung == plan.top else promoted_count(len(ranked), plan.eta)
    trained = epochs or {}
    return {
        "version": DECISION_VERSION,
        "rung": rung,
        "epochs": plan.budgets[rung],
        "metric": plan.metric,
        "mode": plan.mode,
        "eta": plan.eta,
        "configurations": [
            {
                "id": cid,
                "runs": {
                    rid: {"score": scores[rid], "epochs": trained.get(rid, plan.budgets[rung])} for rid in groups[cid]
                },
                "mean": _mean(by_config[cid]),
                "rank": position + 1,
                "promoted": position < keep and rung < plan.top,
            }
            for position, cid in enumerate(ranked)
        ],
    }


def plan_json(plan: Plan, groups: Mapping[str, Sequence[str]]) -> str:
    """The plan and the configurations it searches, as the rungs' parameter (canonical JSON)."""
    return json.dumps(
        {
            "eta": plan.eta,
            "budgets": list(plan.budgets),
            "metric": plan.metric,
            "mode": plan.mode,
            "configurations": {cid: list(runs) for cid, runs in groups.items()},
        },
        sort_keys=True,
    )


def plan_from_json(data: Mapping[str, Any]) -> tuple[Plan, dict[str, list[str]]]:
    """The plan and configurations ``plan_json`` wrote, as read back (json.loads)."""
    plan = Plan(eta=data["eta"], budgets=tuple(data["budgets"]), metric=data["metric"], mode=data["mode"])
    return plan, data["configurations"]


def rung_decision(
    plan: Plan, groups: Mapping[str, Sequence[str]], rung: int, records: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Rung ``rung``'s decision from the records its runs left (file name -> provenance at the rung's
    budget, schema-validated by the caller), each checked to be a run of this search at that budget."""
    owner = {rid: cid for cid, runs in groups.items() for rid in runs}
    scores: dict[str, float | None] = {}
    epochs: dict[str, int] = {}
    for path, record in records.items():
        rid, budget = record["run_id"], record["training"]["max_epochs"]
        if rid not in owner or budget != plan.budgets[rung]:
            raise ProvenanceError(
                f"{path} is run {rid!r} trained to {budget} epochs, not a run of this search at rung {rung} "
                f"({plan.budgets[rung]} epochs). HINT: delete it; the next `snakemake` run makes it again."
            )
        scores[rid] = score_at(record, plan.metric)
        epochs[rid] = record["training"]["epochs_completed"]
    trained = {cid: runs for cid, runs in groups.items() if all(rid in scores for rid in runs)}
    return decide(plan, rung, trained, scores, epochs)


def survivors(decision: Mapping[str, Any]) -> list[str]:
    """The configurations a rung's decision sends to the next rung."""
    return [entry["id"] for entry in decision["configurations"] if entry["promoted"]]


def score_at(record: Mapping[str, Any], metric: str) -> float | None:
    """A run's score at a rung: the best value of ``metric`` its record saw (the record's best score,
    when it ranked by that metric; else that metric at its best epoch), None when it logged none."""
    run = Run(Path(), dict(record))  # read as every reader of records reads them (run.runs)
    score = run.best_score if run.monitor["metric"] == metric else run.at_best.get(metric)
    return float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None


def write_decision(path: str | Path, decision: Mapping[str, Any]) -> None:
    atomic_write_json(Path(path), dict(decision))


def epochs_trained(decisions: Iterable[Mapping[str, Any]]) -> int:
    """Epochs the search trained in all: each run continues from its previous rung, so a run's
    epochs are those of the last rung it reached (fewer than the budget where early stopping ended it)."""
    reached: dict[str, int] = {}
    for decision in decisions:
        for entry in decision["configurations"]:
            for rid, run in entry["runs"].items():
                reached[rid] = max(reached.get(rid, 0), run["epochs"])
    return sum(reached.values())


def outcome(decisions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per configuration, best first: the last rung it reached, its mean score at each rung,
    and whether it won (first at the top rung)."""
    ordered = sorted(decisions, key=lambda d: d["rung"])
    rows: dict[str, dict[str, Any]] = {}
    for decision in ordered:
        for entry in decision["configurations"]:
            row = rows.setdefault(entry["id"], {"id": entry["id"], "seeds": len(entry["runs"]), "scores": {}})
            row["scores"][decision["epochs"]] = entry["mean"]
            row["rung"], row["epochs"], row["rank"] = decision["rung"], decision["epochs"], entry["rank"]
    top = ordered[-1]["rung"] if ordered else None
    for row in rows.values():
        row["winner"] = row["rung"] == top and row["rank"] == 1
    return sorted(rows.values(), key=lambda row: (-row["rung"], row["rank"], row["id"]))
