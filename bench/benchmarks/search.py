"""9. Search: successive halving against the whole grid, from empty directories, in one run.

Nine learning rates (two with --tiny), ``trainer.max_epochs`` 9 (2), eta 3, min_epochs 1, on the
tests' tiny data, on the local profile. The search and the grid each run from an empty directory;
the epochs each trained are counted from the train jobs' logs (one line per epoch trained), and
each one's best configuration is read from its records.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bench.harness import Context, Result, target_figure
from bench.workflows import Workflow

NAME = "search"
TITLE = "9. Search"

LRS = [0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 0.0003, 0.0001, 0.00003]
EPOCH_LINE = re.compile(r"^\S+: epoch \d+/\d+ ", re.MULTILINE)


def config(rates: list[float], max_epochs: int, search: bool) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "data": {"num_train_files": 3, "num_records_per_train_file": 1000, "num_val_records": 400, "num_features": 8},
        "model": {"hidden_sizes": [16]},
        "trainer": {"max_epochs": max_epochs, "batch_size": 32, "early_stopping": {"enabled": False}},
        "launch": {"mem_mb": 1000, "runtime": 10},
        "sweep": {"model.lr": rates},
    }
    if search:
        cfg["search"] = {"method": "successive_halving", "eta": 3, "min_epochs": 1}
    return cfg


def epochs_trained(directory: Path) -> int:
    return sum(len(EPOCH_LINE.findall(log.read_text())) for log in (directory / "logs").rglob("*.log"))


def fit_seconds(directory: Path) -> float:
    """Seconds in trainer.fit over every attempt the workflow trained: the runs' records and, for a
    search, each rung's record (a continued attempt records only its own epochs' time)."""
    records = [*(directory / "results" / "runs").glob("*/provenance.json")]
    records += (directory / "results" / "search").glob("*/epochs-*.json")
    return sum(json.loads(path.read_text())["timing"]["duration_s"] for path in records)


def best_configuration(directory: Path) -> str:
    """The run with the lowest best val_loss among the records of the whole budget."""
    records = [json.loads(p.read_text()) for p in (directory / "results" / "runs").glob("*/provenance.json")]
    return min(records, key=lambda r: r["training"]["best_score"])["run_id"]


def run(ctx: Context) -> Result:
    rates, max_epochs = (LRS[::8], 2) if ctx.sizes.tiny else (LRS, 9)
    seconds, epochs, best, fit = {}, {}, {}, {}
    for name, search in (("search", True), ("grid", False)):
        flow = Workflow(ctx.scratch(name), config(rates, max_epochs, search))
        seconds[name], _ = flow.timed()
        epochs[name] = epochs_trained(flow.directory)
        best[name] = best_configuration(flow.directory)
        fit[name] = fit_seconds(flow.directory)
    scale = f"{len(rates)} learning rates, max_epochs {max_epochs}, eta 3"
    result = Result(NAME, TITLE, raw={"seconds": seconds, "epochs": epochs, "best": best, "fit_seconds": fit})
    result.sizes = {"configurations": len(rates), "max_epochs": max_epochs}
    measured = (
        ("search.wall", f"whole workflow from an empty directory, {scale}", "s", seconds),
        ("search.fit", f"seconds in trainer.fit, all attempts, {scale}", "s", fit),
        ("search.epochs", f"epochs trained, {scale}", "epochs", epochs),
    )
    # Issue 33's target is on the wall time: a search must pay off in time, not only in epochs.
    targets = {"search.wall": 0.6}
    result.figures += [
        target_figure(key, label, unit, values["search"], baseline=values["grid"],
                      ratio=values["search"] / values["grid"], ratio_of="search ÷ grid",
                      op="<=" if key in targets else None, threshold=targets.get(key))
        for key, label, unit, values in measured
    ]  # fmt: skip
    result.notes += [
        f"Best configuration: the search's winner {best['search']}, the grid's best {best['grid']}"
        + ("" if best["search"] == best["grid"] else " (they differ: the search stopped the grid's best early)")
        + ".",
        "The search runs more, shorter jobs than the grid (one per run and rung, against one per run), so "
        "what a job costs before it trains weighs on it more: with warm starts (the local profile's default, "
        "snakeddp.warm) a job imports nothing, and its wall time falls with its epochs; on real models epochs "
        "dominate either way.",
    ]
    wall = next(f for f in result.figures if f.key == "search.wall")
    if wall.met is False:
        result.notes.append(
            f"Missed the target 0.6: the grid's {epochs['grid']:.0f} epochs take {fit['grid']:.1f} s of trainer.fit in "
            f"all, {fit['grid'] / seconds['grid']:.0%} of its {seconds['grid']:.1f} s, so a search that trained no "
            f"epoch at all could not go below {1 - fit['grid'] / seconds['grid']:.2f} of it here; the rest is the "
            "same for both (Snakemake, the "
            "warm process's import, data, records, report) or per job, and the search has more jobs (one per run "
            "and rung, each waiting for its rung's ranking) than the grid (one per run). The target holds where "
            "epochs cost more than a job's start: on this problem an epoch takes "
            f"{fit['grid'] / epochs['grid'] * 1e3:.0f} ms. What a train job costs around its ranks, from a trace "
            "of the tutorial's (stop 40): 0.17 s from its client's start to its ranks' fork (the launch step, the "
            "supervisor's client, two forks from the warm process), then "
            "each rank's process group, Trainer and fit set-up before the first step, and 0.04 s after the ranks "
            "(provenance: git and the installed packages, then three exits). A search rung's jobs pay it once "
            "each: a first-rung attempt's rank (lr-0.1, provenance timing.phases, stop 41) lived 0.16 s, of which "
            "its start 0.06 s, checks 0.02 s, fit set-up 0.03 s, its one epoch 0.035 s and validation 0.015 s, "
            "its end 0.04 s; with the job's cost around its ranks, an attempt takes about 0.35 s for an epoch "
            f"(the grid's average: {fit['grid'] / epochs['grid'] * 1e3:.0f} ms), and the search runs 13 "
            "attempts where the grid runs 9. Since stop 41 the data and record jobs no longer wait "
            "for the import of torch and Lightning (the heavy warm process imports it): the search's data stage "
            "ended at 2.1 s instead of 4.2 s, but its first rung still waits for that import, which is on its "
            "path either way (the search took 7.8-8.0 s in four runs, as before; the grid 7.3-8.8 s)."
        )
    return result
