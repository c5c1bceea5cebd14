"""The training section's verdict from metrics.csv rows: the best epoch by the monitored metric
(trainer.monitor) in any name and either direction, and what the DataModule yielded."""

from __future__ import annotations

from snakeddp.provenance.record import counted, ranking
from snakeddp.run.runs import logged_metrics

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
