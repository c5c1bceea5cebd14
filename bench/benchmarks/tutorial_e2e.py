"""8. The tutorial's workload end to end: snakemake from an empty directory vs the tutorial's way.

The reference tutorial (shared/reference/000) runs two scripts: one writes pickled random
partitions, then a DDP training script trains its one-layer model on one partition per epoch.
The baseline does that by hand (``python -m bench.baselines.tutorial``, then torchrun starting
``bench.baselines.handwritten_ddp --format pickle``: no checksums, no provenance, no report). Ours is
``snakemake --profile profiles/local`` in an empty directory on the same parameters: the data
stage (partitions, checksums, manifest), the environment records, the training run and the
whole report.

Both run in the environment a user's ``make run`` installs (``tools/setup.sh``: the core lock
only), made once next to the results: the benchmarks' own environment also holds the test tools
and the optional AzureML extras, and Snakemake starts slower there (smart_open imports the Azure
storage SDK when it is installed).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path

from bench.harness import (
    REPO,
    TINY,
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
from bench.venvs import linked_core_venv
from bench.workflows import Workflow

NAME = "tutorial_e2e"
TITLE = "8. Tutorial workload end to end"

# The parameters: 8 partitions x 2,000 records x 64 features, 8 epochs, 2 processes, batch 64.
PARTITIONS, RECORDS, VAL_RECORDS, FEATURES, EPOCHS, DEVICES, BATCH = 8, 2000, 2000, 64, 8, 2, 64
BOUND = 1.5  # the "must not exceed"; the target is 1.0


def shape(tiny: bool) -> tuple[int, int, int, int]:
    """Partitions, records in each, validation records and features: the issue's, or --tiny's (the harness's tiny
    sizes, bench.harness.TINY: every step still runs, with 2 of the data stage's 8 partition jobs)."""
    if tiny:
        return TINY.partitions_or(2), TINY.records, TINY.val_records, TINY.features
    return PARTITIONS, RECORDS, VAL_RECORDS, FEATURES


def config(tiny: bool) -> dict:
    epochs = 2 if tiny else EPOCHS
    partitions, records, val_records, features = shape(tiny)
    return {
        "data": {
            "num_train_files": partitions,
            "num_records_per_train_file": records,
            "num_val_records": val_records,
            "num_features": features,
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


def _medians(rounds: list[dict[str, float]], prefix: str) -> dict[str, float]:
    """The median of each measurement whose key starts with ``prefix``, keyed without it."""
    keys = [key for key in rounds[0] if key.startswith(prefix)]
    return {key.removeprefix(prefix): median([round_[key] for round_ in rounds]) for key in keys}


def core_environment(ctx: Context) -> Path:
    """The venv ``make run`` makes (tools/setup.sh, core lock), kept in the results directory. It is made as
    tools/setup.sh leaves it, its packages linked with their bytecode (bench.venvs; tools/setup.sh's own compiling
    of them is a minute of CPU, and gives the same files), snakeddp installed and the stamp of the locks written;
    then tools/setup.sh compares it with the lock, as it does for a user's, and finds it matching (what the stages
    import, its import check, the workflow imports next)."""
    venv = ctx.out / "core-venv"
    made = not (venv / "bin" / "python").exists()
    if made:
        linked_core_venv(venv, REPO, set_up=True)
    setup = subprocess.run(
        ["bash", str(REPO / "tools" / "setup.sh")],
        env={**os.environ, "VENV": str(venv)},
        check=True,
        capture_output=True,
        text=True,
    )
    if made and "setup: installing" in setup.stdout:
        raise RuntimeError(
            "tools/setup.sh set up again the venv bench.venvs made as it leaves one: bench.venvs.setup_stamp no "
            f"longer writes the stamp it reads, or the venv differs from the lock:\n{setup.stdout[-3000:]}"
        )
    return venv / "bin" / "python"


def run(ctx: Context) -> Result:
    cfg = config(ctx.sizes.tiny)
    partitions, records, val_records, features = shape(ctx.sizes.tiny)
    fresh = (ctx.work / f"e2e-{i}" for i in itertools.count())
    python = core_environment(ctx)
    # Jobs start `python`: the core environment's, as in a user's activated venv.
    env = child_env(PATH=os.pathsep.join([str(python.parent), os.environ["PATH"]]))

    def ours() -> dict[str, float]:
        directory = next(fresh)
        seconds, _ = Workflow(directory, cfg).timed(python=python, env=env)
        spans = stage_spans(directory)
        (provenance,) = (directory / "results" / "runs").glob("*/provenance.json")
        phases = json.loads(provenance.read_text())["timing"]["phases"]
        shutil.rmtree(directory)
        return {
            "s": seconds,
            **{f"span:{stage}": value for stage, value in spans.items()},
            **{f"rank0:{phase}": phases[phase] for phase in ("imports_s", "startup_s", "total_s")},
        }

    def imports() -> dict[str, float]:
        # What a rank imports alone (ours, and the baseline's), without a second rank beside it: one fresh process
        # times the baseline's imports, then snakeddp.train's on top (which imports them first), the same modules
        # as a fresh `import snakeddp.train` (2.2 s of CPU either way here): one interpreter and torch import fewer
        # a round (4.4-4.6 -> 3.1-3.4 s of CPU). Its imports frozen once it has printed: its exit's last collection
        # (0.8 s of CPU) is no part of what it times.
        code = (
            "import time; start = time.perf_counter(); import torch, torch.distributed; "
            "print(time.perf_counter() - start); import snakeddp.train; print(time.perf_counter() - start); "
            "import gc; gc.freeze()"
        )
        baseline, ours = map(float, run_checked([str(python), "-c", code], env=env).split()[-2:])
        return {"ours_s": ours, "baseline_s": baseline}

    def tutorial() -> dict[str, float]:
        directory = next(fresh)
        directory.mkdir(parents=True)
        start = time.perf_counter()
        run_checked(
            [str(python), "-m", "bench.baselines.tutorial", str(directory / "data")]
            + [str(n) for n in (partitions, records, val_records, features)],
            env=env,
        )
        argv = [str(python), "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={DEVICES}"]
        argv += ["--max-restarts=0", "--standalone", "-m", "bench.baselines.handwritten_ddp", "--format", "pickle"]
        argv += ["--manifest", str(directory / "data" / "manifest.json"), "--epochs", str(cfg["trainer"]["max_epochs"])]
        argv += ["--batch-size", str(BATCH), "--checkpoint", str(directory / "last.pt")]
        run_checked(argv, env=env)
        seconds = time.perf_counter() - start
        shutil.rmtree(directory)
        return {"s": seconds}

    cases = {"ours": ours, "tutorial": tutorial, "imports": imports}
    samples = alternate(cases, reps=ctx.sizes.reps_or(4), warmup=ctx.sizes.warmup_or(1))
    seconds = {name: median([s["s"] for s in samples[name]]) for name in ("ours", "tutorial")}
    result = Result(
        NAME,
        TITLE,
        raw=samples,
        sizes={
            "partitions": partitions,
            "records": records,
            "features": features,
            "epochs": cfg["trainer"]["max_epochs"],
            "processes": DEVICES,
            "batch": BATCH,
        },
    )
    result.figures.append(
        target_figure(
            "tutorial.e2e",
            f"the tutorial's workload from an empty directory ({partitions} partitions × {records:,} × {features}, "
            f"{cfg['trainer']['max_epochs']} epochs, {DEVICES} processes): `snakemake --profile profiles/local` "
            "(data, checksums, environment records, training, report)",
            "s",
            seconds["ours"],
            baseline=seconds["tutorial"],
            ratio=paired_ratio(samples["ours"], samples["tutorial"], "s"),
            ratio_of="ours ÷ tutorial's scripts",
            op="<=",
            # Issue 33's target (the tutorial issue's was 1.0, within a bound of 1.5).
            threshold=0.8,
        )
    )
    spans = _medians(samples["ours"], "span:")
    result.notes.append(
        "Where ours goes (Snakemake's log, whole seconds, medians; data and environment records run side by side): "
        + ", ".join(f"{stage} {value:.0f} s" for stage, value in spans.items())
        + f", of {seconds['ours']:.0f} s. The baseline took {seconds['tutorial']:.0f} s."
    )
    result.notes.append(
        "Baseline: the tutorial's two steps by hand: `python -m bench.baselines.tutorial` writes the pickled "
        "partitions (torch.randn features, as its create_data.py), then torchrun starts "
        "`bench.baselines.handwritten_ddp --format pickle` (the one-layer model, Adam, validation and a rank-0 "
        "checkpoint each epoch). It checks no data, records no environment or provenance and writes no report; ours "
        "does all of that, in parallel jobs where the DAG allows. Issue 33's target is 0.8 (the tutorial issue's: "
        "1.0, within a bound of 1.5)."
    )
    rank0 = _medians(samples["ours"], "rank0:")
    alone = {key: median([s[key] for s in samples["imports"]]) for key in ("ours_s", "baseline_s")}
    result.notes.append(
        f"The training job's rank 0 (`timing.phases` of its provenance, medians): {rank0['startup_s']:.1f} s from "
        f"its fork to its first step, {rank0['imports_s']:.2f} s of it imports: with warm starts (the local "
        "profile's default, snakeddp.warm) the ranks are forked from the training job's supervisor, itself forked "
        "from the workflow's warm process, which imported torch, Lightning and snakeddp once while the data and "
        f"record jobs ran; its whole life {rank0['total_s']:.1f} s. One process importing a rank's modules alone: "
        f"{alone['ours_s']:.1f} s (`import snakeddp.train`: torch, Lightning, torchmetrics) against "
        f"{alone['baseline_s']:.1f} s for the baseline's ranks (`import torch, torch.distributed`)."
    )
    figure = result.figures[0]
    if figure.met is False:
        bound = "within" if figure.ratio is not None and figure.ratio <= BOUND else "over"
        result.notes.append(
            f"Missed the target 0.8 ({bound} the tutorial issue's bound, {BOUND}): the warm process's one import "
            f"({alone['ours_s']:.1f} s of torch, Lightning and snakeddp, where the baseline's ranks import "
            f"{alone['baseline_s']:.1f} s of torch) is on the critical path: the training job waits for it (it "
            "would otherwise import the same beside it), and the data and record jobs share the other core "
            "meanwhile. Lightning 2.6 imports torch._dynamo (lightning.fabric.wrappers, 0.9 s in one "
            "`python -X importtime` here) and torchmetrics imports matplotlib whenever it is installed (0.4 s). "
            "Snakemake takes about 1 s before its first job (its command line imports every installed executor "
            "plugin; the Slurm plugin imports pandas at module level; the Snakefile is read from 0.62 s on, so the "
            "warm process could start at most 0.2 s earlier). Since stop 41 what takes seconds to import is a "
            "heavy warm process's (snakeddp.warm.heavy), and the data and record jobs no longer wait for it: "
            "in three runs timed from Snakemake's log (stop 41), the data and record jobs were done by 1.4-1.5 s "
            "(in stop 40's trace the last ended at 3.5 s, each held by the import that was running when it "
            "came), the training job began then and waited for the import until about 2.8 s, its ranks trained "
            "for about 0.75 s, the report ran 0.3 s, and the whole took 3.9-4.0 s. That path is Snakemake's start, "
            "the import, the training and the report, one after the other: about 4.0 s, 0.9 of the baseline. "
            "Only a shorter import would meet 0.8 here: Lightning's import of torch._dynamo and torchmetrics' of "
            "matplotlib are upstream's to make lazy. A warm process "
            "that outlives one invocation (started by the first, reused by the next) would take the import "
            "off every run after the first, at the cost of a process that stays behind: weighed, not done "
            "(issue 33 asks that it goes away with Snakemake)."
        )
    result.notes.append(
        "Fixed in stop 40: every exit of a process that imported torch undid torch's operator libraries (174 "
        "finalizers, 57 ms; about 0.1 s in a process forked from a warm one, which copies the pages they touch): "
        "no longer (snakeddp.util.shutdown), in the jobs, the supervisor and every rank. The warm process imports "
        "the report's modules once training's are in (0.46 s of the report job's start), and what an "
        "invocation's jobs do not need not at all (snakeddp.warm.preload)."
    )
    result.notes.append(
        "Fixed in stop 20: the local profile starts its ranks itself (`launch.launcher: direct`, "
        "snakeddp.cluster.supervisor: torchrun's variables, signals passed on, the first failure stops the rest) "
        "instead of through torchrun's agent, which imported torch for 1.6-1.9 s before any rank started; the same "
        "run launched both ways, 3 pairs: 6.3-7.8 s against 8.5-8.7 s. Every run's provenance reads the installed "
        "packages from their metadata headers only (70-100 -> 15-20 ms). In stop 19: the report imports no pandas "
        "(the job 1.7 -> 1.0 s); torchrun ends 0.25 s after its ranks instead of 0.6 s (snakeddp.cluster.agent); "
        "fresh environments hold bytecode (tools/setup.sh; with PYTHONDONTWRITEBYTECODE=1 every process compiled "
        "torch and Lightning again, `import lightning` 10 s instead of 5.3 s); this benchmark runs in the core "
        "environment `make run` installs. In stop 18: Python's final garbage collection (1.2 s per process that "
        "imported torch), Snakemake's scheduler timer (up to 1 s) and the report as five jobs."
    )
    if note := busy_note():
        result.notes.append(note)
    return result
