"""8. The tutorial's workload end to end: snakemake from an empty directory vs the tutorial's way.

The reference tutorial (shared/reference/000) runs two scripts: one writes pickled random
partitions, then a DDP training script trains its one-layer model on one partition per epoch.
The baseline does that by hand (``python -m bench.tutorial``, then torchrun starting
``bench.handwritten_ddp --format pickle``: no checksums, no provenance, no report). Ours is
``snakemake --profile profiles/local`` in an empty directory on the same parameters: the data
stage (partitions, checksums, manifest), the environment records, the training run and the
whole report.
"""

from __future__ import annotations

import itertools
import re
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path

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

NAME = "tutorial_e2e"
TITLE = "8. Tutorial workload end to end"

# The parameters: 8 partitions x 2,000 records x 64 features, 8 epochs, 2 processes, batch 64.
PARTITIONS, RECORDS, VAL_RECORDS, FEATURES, EPOCHS, DEVICES, BATCH = 8, 2000, 2000, 64, 8, 2, 64


def config(tiny: bool) -> dict:
    epochs = 2 if tiny else EPOCHS
    return {
        "data": {
            "num_train_files": PARTITIONS,
            "num_records_per_train_file": RECORDS,
            "num_val_records": VAL_RECORDS,
            "num_features": FEATURES,
        },
        "model": {"name": "linear"},
        "trainer": {"max_epochs": epochs, "batch_size": BATCH, "early_stopping": {"enabled": False}},
        # Replaces the default sweep (config files merge key by key): one run, 2 processes.
        "sweep": {"launch.devices": [DEVICES]},
    }


# Snakemake rules by name prefix (run_config, a tiny job beside the data stage, is left out).
STAGES = {"data": "data_", "environment records": "env_capture", "training": "train", "report": "report"}
_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]$")
# A job's start ("Job 7: <the rule's message>") and end ("Finished jobid: 7 (Rule: data_partition)").
_START = re.compile(r"^Job (\d+): ")
_END = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def stage_spans(directory: Path) -> dict[str, float]:
    """Seconds from Snakemake's start to its first job, and from each stage's first job start to its last
    job's end, read from Snakemake's own log (whole seconds)."""
    (log,) = (directory / ".snakemake" / "log").glob("*.snakemake.log")
    text = log.read_text().splitlines()
    # The log's name is Snakemake's start time (its "Date:" line is hidden with the host banner).
    started = datetime.strptime(log.name.removesuffix(".snakemake.log"), "%Y-%m-%dT%H%M%S.%f").replace(microsecond=0)
    now, starts, spans = started, {}, {}
    for line in text:
        if stamp := _STAMP.match(line.strip()):
            now = datetime.strptime(stamp[1], "%a %b %d %H:%M:%S %Y")
        elif start := _START.match(line.strip()):
            starts[start[1]] = now
        elif end := _END.match(line.strip()):
            stage = next((name for name, prefix in STAGES.items() if end[2].startswith(prefix)), None)
            if stage is not None:
                began = starts[end[1]]
                first, last = spans.get(stage, (began, now))
                spans[stage] = (min(first, began), max(last, now))
    first_job = min(first for first, _ in spans.values())
    return {"start-up and DAG": (first_job - started).total_seconds()} | {
        stage: (last - first).total_seconds() for stage, (first, last) in spans.items()
    }


def run(ctx: Context) -> Result:
    cfg = config(ctx.sizes.tiny)
    fresh = (ctx.work / f"e2e-{i}" for i in itertools.count())

    def ours() -> dict[str, float]:
        directory = next(fresh)
        seconds, _ = Workflow(directory, cfg).timed()
        spans = stage_spans(directory)
        shutil.rmtree(directory)
        return {"s": seconds, **{f"span:{stage}": value for stage, value in spans.items()}}

    def tutorial() -> dict[str, float]:
        directory = next(fresh)
        directory.mkdir(parents=True)
        start = time.perf_counter()
        run_checked(
            [sys.executable, "-m", "bench.tutorial", str(directory / "data")]
            + [str(n) for n in (PARTITIONS, RECORDS, VAL_RECORDS, FEATURES)],
            env=child_env(),
        )
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={DEVICES}"]
        argv += ["--max-restarts=0", "--standalone", "-m", "bench.handwritten_ddp", "--format", "pickle"]
        argv += ["--manifest", str(directory / "data" / "manifest.json"), "--epochs", str(cfg["trainer"]["max_epochs"])]
        argv += ["--batch-size", str(BATCH), "--checkpoint", str(directory / "last.pt")]
        run_checked(argv, env=child_env())
        seconds = time.perf_counter() - start
        shutil.rmtree(directory)
        return {"s": seconds}

    samples = alternate({"ours": ours, "tutorial": tutorial}, reps=ctx.sizes.reps_or(2), warmup=ctx.sizes.warmup_or(0))
    seconds = {name: median([s["s"] for s in values]) for name, values in samples.items()}
    result = Result(
        NAME,
        TITLE,
        raw=samples,
        sizes={
            "partitions": PARTITIONS,
            "records": RECORDS,
            "features": FEATURES,
            "epochs": cfg["trainer"]["max_epochs"],
            "processes": DEVICES,
            "batch": BATCH,
        },
    )
    result.figures.append(
        target_figure(
            "tutorial.e2e",
            f"the tutorial's workload from an empty directory ({PARTITIONS} partitions × {RECORDS:,} × {FEATURES}, "
            f"{cfg['trainer']['max_epochs']} epochs, {DEVICES} processes): `snakemake --profile profiles/local` "
            "(data, checksums, environment records, training, report)",
            "s",
            seconds["ours"],
            baseline=seconds["tutorial"],
            ratio=paired_ratio(samples["ours"], samples["tutorial"], "s"),
            ratio_of="ours ÷ tutorial's scripts",
            op="<=",
            threshold=1.0,
        )
    )
    spans = {
        key.removeprefix("span:"): median([s[key] for s in samples["ours"]])
        for key in samples["ours"][0]
        if key.startswith("span:")
    }
    result.notes.append(
        "Where ours goes (Snakemake's log, whole seconds, medians; data and environment records run side by side): "
        + ", ".join(f"{stage} {value:.0f} s" for stage, value in spans.items())
        + f", of {seconds['ours']:.0f} s. The baseline took {seconds['tutorial']:.0f} s."
    )
    result.notes.append(
        "Baseline: the tutorial's two steps by hand: `python -m bench.tutorial` writes the pickled partitions "
        "(torch.randn features, as its create_data.py), then torchrun starts `bench.handwritten_ddp --format pickle` "
        "(the one-layer model, Adam, validation and a rank-0 checkpoint each epoch). It checks no data, records no "
        "environment or provenance and writes no report; ours does all of that, in parallel jobs where the DAG "
        "allows. The issue's bound is 1.5; the target 1.0."
    )
    if result.figures[0].met is False:
        result.notes.append(
            "Missed: the gap is what the baseline does not do or import. Snakemake's start-up and DAG (about "
            "1.5 s; the baseline has none); the ranks' `import lightning`, about 2 s beyond `import torch` "
            "(Lightning imports torch._dynamo and torchmetrics at module level; see 4., `timing.phases.imports_s`); "
            "the report, one job whose Python start-up and pandas, matplotlib and rocrate imports take about 1.4 s. "
            "The data stage takes about as long as the baseline's data script (ours one short Python process per "
            "partition, the baseline one process importing torch). Fixed here: every process that had imported "
            "torch and Lightning spent 1.2 s of its exit in Python's final garbage collection, and Snakemake "
            "waited up to 1 s more for its scheduler's wake-up timer (snakeddp.shutdown); the report was five "
            "jobs and is one. Next step: several partitions per data job; it changes the data rules' command, "
            "which every finished pipeline would answer by regenerating its data and retraining once, so it "
            "belongs with the next change that retrains anyway (BLAKE3 for the checksums, 1.)."
        )
    if note := busy_note():
        result.notes.append(note)
    return result
