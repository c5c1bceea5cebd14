"""Finished runs ranked by the metric each monitored, and the curves the report plots of them."""

from __future__ import annotations

from pathlib import Path

from snakeddp.report.figures import plotted_metrics
from snakeddp.run.runs import Run, best_run


def run(run_id: str, metric: str | None, mode: str, score: float | None, metrics=()) -> Run:
    training = {"best_val_loss": score if metric is None else None, "best_val_acc": None}
    if metric is not None:
        training.update(monitor={"metric": metric, "mode": mode}, best_score=score)
    return Run(Path(run_id), {"run_id": run_id, "training": training}, list(metrics))


def test_the_best_run_ranks_by_the_monitored_metric_and_only_among_runs_that_share_it():
    assert best_run([run("a", "val_acc", "max", 0.7), run("b", "val_acc", "max", 0.9)]).run_id == "b"
    assert best_run([run("a", None, "min", 0.3), run("b", "val_loss", "min", 0.2)]).run_id == "b", "older records"
    assert best_run([run("a", "val_acc", "max", 0.7), run("b", "val_loss", "min", 0.2)]) is None
    assert best_run([run("a", "val_loss", "min", None)]) is None


def test_the_curves_plot_what_was_logged_and_name_what_was_asked_for_but_absent():
    runs = [run("a", "valid_f1", "max", 0.8, [{"epoch": 0, "valid_f1": 0.8, "lr": 0.1, "val_acc": None}])]
    assert plotted_metrics(runs, None) == (["valid_f1"], [])
    assert plotted_metrics(runs, ["val_loss", "val_acc", "lr"]) == (["lr"], ["val_loss", "val_acc"])
    assert plotted_metrics(runs, ["val_acc"]) == (["valid_f1"], ["val_acc"]), "never an empty figure"
