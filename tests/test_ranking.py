"""Which epoch and which run are best: by the monitored metric (trainer.monitor), in any name and
either direction, from metrics.csv rows (provenance.record) and from finished runs (run.runs)."""

from __future__ import annotations

from pathlib import Path

from snakeddp.provenance.record import counted, ranking
from snakeddp.report.figures import plotted_metrics
from snakeddp.run.runs import Run, best_run, logged_metrics

ROWS = [  # as metrics.csv holds them: text, empty where nothing was logged
    {"epoch": "0", "samples": "64", "batches": "4", "val_samples": "32", "val_batches": "2", "valid_f1": "0.5",
     "val_loss": "0.9", "train_mse": "1.0", "lr": "0.1"},
    {"epoch": "1", "samples": "64", "batches": "4", "val_samples": "32", "val_batches": "2", "valid_f1": "0.8",
     "val_loss": "0.7", "train_mse": "", "lr": "0.1"},
    {"epoch": "2", "samples": "64", "batches": "4", "val_samples": "32", "val_batches": "2", "valid_f1": "nan",
     "val_loss": "0.6", "train_mse": "0.4", "lr": "0.1"},
]  # fmt: skip


def test_the_best_epoch_follows_the_monitored_metric_and_its_mode_skipping_nan():
    best = ranking(ROWS, {"metric": "valid_f1", "mode": "max"})
    assert (best["best_epoch"], best["best_score"]) == (1, 0.8), "a NaN epoch ranks nowhere"
    assert best["best_metrics"] == {"train_mse": None, "val_loss": 0.7, "valid_f1": 0.8}
    assert (best["best_val_loss"], best["best_val_acc"]) == (0.7, None), "val_acc: not logged"
    lowest = ranking(ROWS, {"metric": "val_loss", "mode": "min"})
    assert (lowest["best_epoch"], lowest["best_score"]) == (2, 0.6)
    assert ranking(ROWS, {"metric": "val_acc", "mode": "max"})["best_epoch"] is None


def test_logged_metrics_are_the_columns_the_training_loop_did_not_write():
    assert logged_metrics(ROWS) == ["train_mse", "val_loss", "valid_f1"]
    assert logged_metrics([{"epoch": "0", "val_acc": "", "val_loss": "0.5"}]) == ["val_loss"], "older empty columns"


def test_what_the_datamodule_yielded_is_the_first_epochs_count():
    assert counted(ROWS) == {"train_samples_per_epoch": 64, "train_batches_per_epoch": 4, "val_samples": 32,
                             "val_batches": 2}  # fmt: skip
    assert counted([{"epoch": "0", "samples": "64"}]) is None, "metrics.csv from before batches were counted"


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
