"""11. Small sweep: 12 runs of a tiny model from empty results, against the same models trained by hand.

Issue 33's yardstick for the workflow's fixed cost per run: `snakemake --profile local` (data,
environment records, 12 runs of 2 epochs, report) from an empty directory, with warm starts (the
default: one warm process per invocation forks every job, snakeddp.warm) and cold
(SNAKEDDP_WARM_START=0: every job a fresh interpreter), against one Python process that imports
torch and Lightning once and trains the same 12 models one after another
(``bench.baselines.handwritten_sweep``). The three cases alternate, each from an empty directory.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.harness import (
    Context,
    Result,
    alternate,
    busy_note,
    child_env,
    median,
    paired_ratio,
    run_checked,
    target_figure,
)
from bench.workflows import Workflow

NAME = "sweep"
TITLE = "11. Small sweep"
LRS = [round(0.001 * (i + 1), 3) for i in range(12)]
DATA = {"num_train_files": 3, "num_records_per_train_file": 300, "num_val_records": 200, "num_features": 8}


def config(lrs: list[float], epochs: int) -> dict[str, Any]:
    return {
        "data": DATA,
        "model": {"hidden_sizes": [16]},
        "trainer": {"max_epochs": epochs, "batch_size": 32},
        "launch": {"mem_mb": 1000, "runtime": 10, "accelerator": "cpu"},
        "sweep": {"model.lr": lrs},
    }


def workflow(directory: Path, lrs: list[float], epochs: int, warm: bool) -> dict[str, float]:
    flow = Workflow(directory, config(lrs, epochs))
    seconds, _ = flow.timed(env=child_env(SNAKEDDP_WARM_START="1" if warm else "0"))
    records = [json.loads(p.read_text()) for p in sorted((directory / "results" / "runs").glob("*/provenance.json"))]
    assert len(records) == len(lrs), f"{len(records)} runs trained, not {len(lrs)}"
    started = {r["launch"]["job_start"] for r in records}
    assert started == {"warm" if warm else "cold"}, started
    assert (directory / "results" / "report" / "report.html").is_file()
    return {
        "wall_s": seconds,
        "rank_total_s": median([r["timing"]["phases"]["total_s"] for r in records]),
        "rank_startup_s": median([r["timing"]["phases"]["startup_s"] for r in records]),
    }


def by_hand(directory: Path, lrs: list[float], epochs: int) -> dict[str, float]:
    argv = [sys.executable, "-m", "bench.baselines.handwritten_sweep", "--out", str(directory), "--epochs", str(epochs)]
    argv += ["--lrs", ",".join(map(str, lrs)), "--records", str(DATA["num_records_per_train_file"])]
    argv += ["--val-records", str(DATA["num_val_records"]), "--features", str(DATA["num_features"])]
    output = run_checked(argv)
    timings = json.loads(next(line for line in output.splitlines() if line.startswith('{"imports_s"')))
    return {"imports_s": timings["imports_s"], "fit_s": statistics.median(timings["fit_s"])}


def run(ctx: Context) -> Result:
    lrs, epochs = (LRS[:2], 2) if ctx.sizes.tiny else (LRS, 2)  # --tiny: still a sweep, of the fewest runs
    counter = iter(range(10_000))

    def fresh() -> Path:
        return ctx.work / str(next(counter))

    samples = alternate(
        {
            "warm": lambda: workflow(fresh(), lrs, epochs, warm=True),
            "cold": lambda: workflow(fresh(), lrs, epochs, warm=False),
            "hand": lambda: by_hand(fresh(), lrs, epochs),
        },
        reps=ctx.sizes.reps_or(3),
        warmup=ctx.sizes.warmup_or(1),
    )
    wall = {name: median([s["wall_s"] for s in values]) for name, values in samples.items()}
    scale = f"{len(lrs)} runs of a tiny model (MLP [16], 8 features), {epochs} epochs of 300 samples each"
    result = Result(NAME, TITLE, raw={"samples": samples}, sizes={"runs": len(lrs), "epochs": epochs})
    result.figures += [
        target_figure(
            "sweep.warm",
            f"whole workflow from empty results, {scale}: warm starts (the default) vs the models trained by "
            "hand in one process",
            "s",
            wall["warm"],
            baseline=wall["hand"],
            ratio=paired_ratio(samples["warm"], samples["hand"], "wall_s"),
            ratio_of="ours ÷ hand-written",
            op="<=",
            threshold=2.5,  # issue 72: at most 2.5x the same trainings in one warm process
        ),
        target_figure(
            "sweep.cold",
            "the same with SNAKEDDP_WARM_START=0 (every job a fresh interpreter)",
            "s",
            wall["cold"],
            baseline=wall["hand"],
            ratio=paired_ratio(samples["cold"], samples["hand"], "wall_s"),
            ratio_of="ours ÷ hand-written",
        ),
    ]
    warm_rank = median([s["rank_total_s"] for s in samples["warm"]])
    cold_rank = median([s["rank_total_s"] for s in samples["cold"]])
    cold_startup = median([s["rank_startup_s"] for s in samples["cold"]])
    imports = median([s["imports_s"] for s in samples["hand"]])
    fit = median([s["fit_s"] for s in samples["hand"]])
    result.notes += [
        f"Medians of the rounds: warm {wall['warm']:.1f} s, cold {wall['cold']:.1f} s, by hand {wall['hand']:.1f} s "
        f"({imports:.1f} s of it importing torch and Lightning, then {fit:.2f} s a model in trainer.fit).",
        f"A rank's whole life (provenance `timing.phases.total_s`, median over runs): {warm_rank:.2f} s warm, "
        f"{cold_rank:.2f} s cold (of which {cold_startup:.2f} s before its first step). Both workflows also "
        "start Snakemake (about 2 s: its imports and plugins, the DAG), generate and checksum the data, record "
        "the environments, write every run's config and provenance, and write the report; by hand there is none "
        "of that.",
    ]
    if note := busy_note():
        result.notes.append(note)
    return result
