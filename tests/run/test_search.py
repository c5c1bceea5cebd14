"""Successive halving's decisions: pure functions of the config and the rungs' scores."""

import json
import math
import random

import pytest

from snakeddp import config
from snakeddp.errors import ConfigError, ProvenanceError
from snakeddp.run import rungs, search

LRS = [0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 0.0003, 0.0001, 0.00003]
LRS_IDS = [config.run_id({"model.lr": lr}) for lr in LRS]


def searched(sweep, **settings):
    cfg = config.validate(
        {"sweep": sweep, "trainer": {"max_epochs": 9}, "search": {"method": "successive_halving", **settings}}
    )
    return cfg, config.expand_sweep(cfg)


def loss(lr, epochs):
    """A made-up learning curve: lr 0.01 is best, every configuration improves with epochs."""
    return abs(math.log10(lr) + 2) + 1 / epochs


def simulate(sweep, **settings):
    """Run the whole search on made-up scores; returns its decisions."""
    cfg, runs = searched(sweep, **settings)
    plan, groups = search.plan(cfg, runs), search.configurations(runs)
    decisions, alive = [], list(groups)
    for rung in plan.rungs:
        trained = {cid: groups[cid] for cid in alive}
        scores = {rid: loss(runs[rid]["point"]["model.lr"], plan.budgets[rung]) for cid in alive for rid in groups[cid]}
        decisions.append(search.decide(plan, rung, trained, scores))
        alive = search.survivors(decisions[-1])
    return plan, decisions


@pytest.mark.parametrize(
    ("min_epochs", "eta", "max_epochs", "expected"),
    [(1, 3, 9, (1, 3, 9)), (1, 3, 8, (1, 3, 8)), (2, 2, 9, (2, 4, 8, 9)), (9, 3, 9, (9,)), (1, 3, 1, (1,))],
)
def test_rung_budgets_grow_by_eta_up_to_max_epochs(min_epochs, eta, max_epochs, expected):
    assert search.budgets(min_epochs, eta, max_epochs) == expected


def test_nine_learning_rates_train_at_most_33_epochs_and_keep_the_grid_winner():
    plan, decisions = simulate({"model.lr": LRS}, eta=3, min_epochs=1)
    assert plan.budgets == (1, 3, 9)
    assert [len(d["configurations"]) for d in decisions] == [9, 3, 1]
    # 9 runs reach epoch 1, 3 of them epoch 3, 1 of them epoch 9: 6 + 2 + 9 epochs in all.
    assert search.epochs_trained(decisions) == 6 * 1 + 2 * 3 + 1 * 9
    assert search.epochs_trained(decisions) <= 33 < 81
    winner = [row for row in search.outcome(decisions) if row["winner"]]
    assert [row["id"] for row in winner] == ["lr-0.01"]


def test_listing_the_values_in_another_order_changes_no_decision():
    _, listed = simulate({"model.lr": LRS})
    shuffled = LRS[:]
    random.Random(7).shuffle(shuffled)
    _, reordered = simulate({"model.lr": shuffled})
    assert json.dumps(listed, sort_keys=True) == json.dumps(reordered, sort_keys=True)


def test_seeds_are_averaged_before_ranking_and_counted():
    cfg, runs = searched({"model.lr": [0.1, 0.01], "seed": [1, 2]})
    plan, groups = search.plan(cfg, runs), search.configurations(runs)
    assert sorted(groups) == ["lr-0.01", "lr-0.1"] and all(len(r) == 2 for r in groups.values())
    # lr-0.1 has the single best seed, lr-0.01 the better mean.
    scores = {groups["lr-0.1"][0]: 0.1, groups["lr-0.1"][1]: 0.9, groups["lr-0.01"][0]: 0.3, groups["lr-0.01"][1]: 0.4}
    decision = search.decide(plan, 0, groups, scores)
    assert [e["id"] for e in decision["configurations"]] == ["lr-0.01", "lr-0.1"]
    assert decision["configurations"][0]["mean"] == pytest.approx(0.35)
    assert search.survivors(decision) == ["lr-0.01"]


def test_ties_and_missing_scores_rank_by_a_fixed_order():
    assert search.rank({"b": [0.5], "a": [0.5], "c": [None], "d": [0.1]}, "min") == ["d", "a", "b", "c"]
    assert search.rank({"b": [0.5], "a": [float("nan")], "c": [0.9]}, "max") == ["c", "b", "a"]


def test_each_rung_promotes_a_third_and_the_top_rung_promotes_none():
    assert [search.promoted_count(n, 3) for n in (9, 3, 2, 1, 10)] == [3, 1, 1, 1, 3]
    plan, decisions = simulate({"model.lr": LRS})
    assert not search.survivors(decisions[plan.top])


def test_max_epochs_in_the_sweep_is_refused_with_a_hint():
    cfg, runs = searched({"model.lr": [0.1, 0.01], "trainer.max_epochs": [3, 9]})
    with pytest.raises(ConfigError, match=r"trainer.max_epochs is swept.*HINT: remove trainer.max_epochs"):
        search.plan(cfg, runs)
    cfg, runs = searched({"model.lr": [0.1, 0.01]})  # as the HINT says
    assert search.plan(cfg, runs).budgets == (1, 3, 9)


def test_a_first_rung_longer_than_max_epochs_is_refused():
    cfg, runs = searched({"model.lr": [0.1, 0.01]}, min_epochs=10)
    with pytest.raises(ConfigError, match=r"min_epochs=10 is more than trainer.max_epochs=9, .* HINT: lower"):
        search.plan(cfg, runs)
    cfg, runs = searched({"model.lr": [0.1, 0.01]}, min_epochs=9)  # as the HINT says
    assert search.plan(cfg, runs).budgets == (9,)


def test_no_search_section_plans_nothing():
    cfg = config.validate({"sweep": {"model.lr": [0.1]}})
    assert search.plan(cfg, config.expand_sweep(cfg)) is None


def record(run_id, max_epochs, best_score, completed=None):
    return {
        "run_id": run_id,
        "training": {
            "max_epochs": max_epochs,
            "epochs_completed": completed or max_epochs,
            "monitor": {"metric": "val_loss", "mode": "min"},
            "best_score": best_score,
        },
    }


def test_a_record_of_another_budget_or_run_is_refused():
    cfg, runs = searched({"model.lr": [0.1, 0.01]})
    plan, groups = search.plan(cfg, runs), search.configurations(runs)
    with pytest.raises(
        ProvenanceError, match=r"trained to 3 epochs, not a run of this search at rung 0 .*HINT: delete"
    ):
        search.rung_decision(plan, groups, 0, {"a.json": record("lr-0.1", 3, 0.5)})
    with pytest.raises(ProvenanceError, match="'lr-7' trained to 1 epochs"):
        search.rung_decision(plan, groups, 0, {"a.json": record("lr-7", 1, 0.5)})
    decision = search.rung_decision(
        plan, groups, 0, {"a.json": record("lr-0.1", 1, 0.5), "b.json": record("lr-0.01", 1, 0.4, completed=1)}
    )
    assert search.survivors(decision) == ["lr-0.01"]


def test_a_decision_file_snakeddp_did_not_write_is_refused(tmp_path):
    path = tmp_path / "rung-0.json"
    path.write_text(json.dumps({"version": 1, "configurations": [{"id": "x", "promoted": "yes"}]}))
    with pytest.raises(ProvenanceError, match="is not a search decision snakeddp wrote. HINT: delete it"):
        rungs.read_decision(path)
    search.write_decision(path, {"version": 1, "configurations": [{"id": "x", "promoted": True}]})
    assert search.survivors(rungs.read_decision(path)) == ["x"]


def test_the_runs_a_search_stopped_are_named_with_their_rung(tmp_path):
    _, decisions = simulate({"model.lr": LRS})
    for decision in decisions:
        search.write_decision(tmp_path / "search" / f"rung-{decision['rung']}.json", decision)
    stopped = rungs.stopped(tmp_path)
    assert sorted(stopped) == sorted(set(LRS_IDS) - {"lr-0.01"})
    assert {entry["rung"] for entry in stopped.values()} == {0, 1}
    assert sorted(rid for rid, entry in stopped.items() if entry["rung"] == 1) == sorted(
        rid for rid, entry in stopped.items() if entry["epochs"] == 3
    )
    assert rungs.stopped(tmp_path / "no-search") == {}
