"""12. Spark: one run through the workflow's shared Spark application on a local standalone cluster vs the
direct launcher, and a three-run sweep through `snakemake --profile spark` vs `--profile local` (issue 46).

Both run cases are ``python -m snakeddp.launch`` of the same run (the default linear model, 2 gloo
ranks, one thread each): ``--platform spark`` against a master and two 1-core workers on
127.0.0.1 (started once by the documented one-liner, ``python scripts/spark_cluster.py start``,
run as a command: bench imports no test module), its run handed to a shared Spark application as a
workflow's train jobs hand theirs (started once, its session paid in the discarded first round), and
``--platform local`` (the direct launcher: snakeddp's supervisor forking both ranks). The figures are
the run's fixed cost (launch to the first step plus the end of the last epoch to exit: the wall time
less rank 0's training window, from provenance ``timing.phases`` as in 4.), its training samples/s
(metrics.csv), and the sweep's whole time (data, environments, runs, report). The cluster's own start
is outside all: it is paid once per cluster, not per run.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import runs, spread_ingest
from bench.datasets import data_config, ensure_dataset
from bench.harness import REPO, Context, Result, alternate, busy_note, child_env, median, paired_ratio, target_figure
from bench.workflows import Workflow
from snakeddp import config as configuration
from snakeddp.run.runfile import RunFile
from snakeddp.spark import sharing

NAME = "spark"
TITLE = "12. Spark (the shared application, warm ranks)"
CLUSTER = REPO / "scripts" / "spark_cluster.py"


def cluster(action: str, directory: Path) -> float:
    """The documented one-liner that starts (or stops) the local cluster; its seconds."""
    begun = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(CLUSTER), action, "--dir", str(directory)],
        env=child_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{CLUSTER.name} {action} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return time.perf_counter() - begun


#: The sweep of issue 46: three 2-process runs of 2 epochs of the tests' tiny model.
SWEEP = {
    "data": {"num_train_files": 3, "num_records_per_train_file": 300, "num_val_records": 200, "num_features": 8},
    "model": {"hidden_sizes": [16]},
    "trainer": {"max_epochs": 2, "batch_size": 32},
    "launch": {"mem_mb": 1000, "runtime": 10, "accelerator": "cpu", "devices": 2},
    "sweep": {"model.lr": [0.001, 0.002, 0.003]},
}
RUNS_IN_WORDS = {1: "one", 2: "two", 3: "three"}


def sweep_config(tiny: bool) -> dict[str, Any]:
    """Issue 46's sweep; --tiny: its first run alone, which still goes through each profile's whole workflow (the
    shared application's start included) and checks the harness as the full sweep would."""
    rates = SWEEP["sweep"]["model.lr"]
    return {**SWEEP, "sweep": {"model.lr": rates[:1] if tiny else rates}}


def through_spark(run: RunFile, manifest: Path, run_dir: Path, conf_dir: Path, application: str) -> dict[str, Any]:
    """The run on the spark platform, its driver pointed at the cluster by SPARK_CONF_DIR and handed to the
    shared ``application``; bench.runs' figures."""
    run_dir.mkdir(parents=True)
    run.write(run_dir / "run.yaml")
    argv = [sys.executable, "-m", "snakeddp.launch", "--platform", "spark", "--config", str(run_dir / "run.yaml")]
    argv += ["--run-dir", str(run_dir), "--data", str(manifest)]
    env = child_env(SPARK_CONF_DIR=str(conf_dir), **{sharing.VARIABLE: application})
    begun = time.perf_counter()
    with (run_dir / "launch.log").open("w") as log:
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, check=False).returncode
    wall = time.perf_counter() - begun
    if code != 0:
        raise RuntimeError(f"the spark launch failed ({code}):\n{(run_dir / 'launch.log').read_text()[-4000:]}")
    out = runs.measured(run_dir, wall)
    # The driver's own line: its SparkSession (a JVM, registered with the master, executors granted).
    said = re.search(r"session started in ([0-9.]+) s", (run_dir / "launch.log").read_text())
    out["session_s"] = float(said[1]) if said else float("nan")
    return out


def run(ctx: Context) -> Result:
    sizes = ctx.sizes
    parts = sizes.partitions_or(2)
    epochs = 2 * parts
    batch_size = configuration.validate({})["trainer"]["batch_size"]
    data = data_config(sizes.records, sizes.features, min(sizes.val_records, 2000), parts)
    manifest = ensure_dataset(ctx.scratch("data"), data)
    run = runs.run_file(data, [], epochs, batch_size, devices=2)
    # The spark platform cannot tell what its executors' nodes have; these are this machine's CPUs.
    run.config["launch"]["accelerator"] = "cpu"
    # Each run directory alone under its parent: beside another of the same key, a launch restores it.
    run_dirs = (ctx.work / "runs" / f"{i}" / "run" for i in itertools.count())
    home = ctx.scratch("cluster")
    started_s = cluster("start", home)
    details: dict[str, list[dict[str, Any]]] = {"spark": [], "direct": []}
    shared = sharing.SharedApplication()
    conf = child_env(SPARK_CONF_DIR=str(home / "conf"))
    application = shared.start(ctx.scratch("application") / "spark", (2, 2), conf)

    def case(name: str):
        def measure() -> dict[str, float]:
            run_dir = next(run_dirs)
            if name == "spark":
                out = through_spark(run, manifest, run_dir, home / "conf", application)
            else:
                out = runs.ours(run, manifest, run_dir)
            # From rank 0's record (written as its last act) to the launch's exit.
            out["after_s"] = time.time() - (run_dir / "provenance.json").stat().st_mtime
            details[name].append(out)
            return {"samples_per_s": runs.samples_per_s(out), "fixed_s": out["fixed_s"], "wall_s": out["wall_s"]}

        return measure

    sweeps = (ctx.work / "sweeps" / f"{i}" for i in itertools.count())
    swept_config = sweep_config(sizes.tiny)
    runs_swept = len(swept_config["sweep"]["model.lr"])

    def sweep(profile: str):
        def measure() -> dict[str, float]:
            env = child_env(SPARK_CONF_DIR=str(home / "conf"))
            seconds, _ = Workflow(next(sweeps), swept_config, profile=profile).timed(env=env)
            return {"wall_s": seconds}

        return measure

    try:
        samples = alternate(
            {"spark": case("spark"), "direct": case("direct")}, reps=sizes.reps_or(3), warmup=sizes.warmup_or(1)
        )
        shared.close()
        swept = alternate(
            {"spark": sweep("spark"), "local": sweep("local")}, reps=sizes.reps_or(2), warmup=sizes.warmup_or(1)
        )
        # Ingestion on the executors (issue 74, item 4) on the same cluster, every application above ended: a
        # second cluster's start (about 20 s, 3 JVMs) would measure nothing more.
        rows, features = spread_ingest.sizes(sizes.tiny)
        ingested = spread_ingest.measure_on(
            ctx.scratch("spread_ingest"), rows, features, sizes.reps_or(1), home / "conf", started_s
        )
    finally:
        shared.close()
        stopped_s = cluster("stop", home)
    result = Result(
        NAME,
        TITLE,
        raw={
            "samples": samples,
            "sweep": swept,
            "cluster_start_s": started_s,
            "cluster_stop_s": stopped_s,
            "phases": {name: [d["phases"] for d in values] for name, values in details.items()},
        },
        sizes={
            "partitions": parts,
            "epochs": epochs,
            "records": sizes.records,
            "features": sizes.features,
            "batch_per_process": batch_size,
            "world_size": 2,
        },
    )
    fixed = {name: median([s["fixed_s"] for s in values]) for name, values in samples.items()}
    rate = {name: median([s["samples_per_s"] for s in values]) for name, values in samples.items()}
    wall = {name: median([s["wall_s"] for s in values]) for name, values in samples.items()}
    sweep_s = {name: median([s["wall_s"] for s in values]) for name, values in swept.items()}
    result.figures += [
        target_figure(
            "spark.sweep",
            f"a sweep of {RUNS_IN_WORDS[runs_swept]} 2-process run{'s' * (runs_swept > 1)} of 2 epochs from empty "
            "results, `snakemake "
            "--profile spark` (one Spark application for the invocation) vs `--profile local`",
            "s",
            sweep_s["spark"],
            baseline=sweep_s["local"],
            ratio=paired_ratio(swept["spark"], swept["local"], "wall_s"),
            ratio_of="spark ÷ local",
            op="<=",
            threshold=3.0,
        ),
        target_figure(
            "spark.fixed_cost",
            "fixed cost of one run (launch to the first step + end of the last epoch to exit), linear model, "
            "2 ranks: a barrier stage of warm ranks in a shared application on a local standalone cluster (2 "
            "workers) vs the direct launcher",
            "s",
            fixed["spark"],
            baseline=fixed["direct"],
            ratio=paired_ratio(samples["spark"], samples["direct"], "fixed_s"),
            ratio_of="spark ÷ direct",
            op="<=",
            threshold=2.0,
        ),
        target_figure(
            "spark.samples_per_s",
            "training samples/s, linear model, 2 ranks: through Spark vs the direct launcher",
            "samples/s",
            rate["spark"],
            baseline=rate["direct"],
            ratio=paired_ratio(samples["spark"], samples["direct"], "samples_per_s"),
            ratio_of="spark ÷ direct",
        ),
    ]
    result.notes += notes(details, fixed, wall, started_s, stopped_s, epochs, parts, batch_size)
    result.notes.append(
        f"The sweep ({runs_swept} run{'s' * (runs_swept > 1)} of 2 ranks and 2 epochs of the tests' tiny model, from "
        f"empty results; medians of {len(swept['spark'])} alternating rounds after a discarded one): "
        f"{sweep_s['spark']:.1f} s with `--profile spark` against {sweep_s['local']:.1f} s with `--profile local`. "
        "Through Spark it pays one session for the whole sweep, started with the executors' Python as soon as "
        "the workflow starts (beside the data and environment jobs, on the same 2 cores), then for each run a "
        "barrier stage whose tasks meet at the run's line server and fork their ranks from Python workers that "
        "imported torch and Lightning before the stage, one run at a time on this 2-slot cluster; the local "
        "profile's warm process forks every job and rank with those imports done once. The application's log "
        "(.snakemake/snakeddp/spark-application.log) says when its session and the executors' Python were up."
    )
    result.notes.append(
        "Before the session was started ahead (2026-11-26, first round of that day): the sweep 26.6-28.8 s, "
        "3.4-3.5x local: a SparkSession (not a bare SparkContext) of 10-14 s on JVMs with the full JIT, started "
        "when the first train job asked, then the executors' daemons' imports, and each run's tasks meeting "
        "through Spark's allGather, whose task side polls once a second (1.0 s of every run, measured per task)."
    )
    result.notes.append(
        "Before issue 46 item 2 (2026-11-25: the shared application ran TorchDistributor, whose tasks each "
        "started torchrun and a rank that imported torch and Lightning itself): a run's fixed cost 12.7 s, 2.9x "
        "direct, and the sweep 54.8 s, 7.5x local; before item 1 (a session per run): 7.8-9.2x and 14.3x."
    )
    if note := busy_note():
        result.notes.append(note)
    figures, notes_on, raw = ingested  # bench.spread_ingest's
    result.figures += figures
    result.notes += notes_on
    result.raw.update(raw)
    return result


def phase(details: list[dict[str, Any]], key: str) -> float:
    return median([d["phases"][key] for d in details])


def notes(
    details: dict[str, list[dict[str, Any]]],
    fixed: dict[str, float],
    wall: dict[str, float],
    started_s: float,
    stopped_s: float,
    epochs: int,
    parts: int,
    batch_size: int,
) -> list[str]:
    spark, direct = details["spark"], details["direct"]
    after = {name: median([d["after_s"] for d in values]) for name, values in details.items()}
    # Launch to rank 0's process start: what is neither the rank's own start, its training nor its exit.
    before = {
        name: fixed[name] - phase(values, "startup_s") - phase(values, "teardown_s") - after[name]
        for name, values in details.items()
    }
    return [
        f"{epochs} epochs over {parts} partitions, batch {batch_size} per rank, Adam, gloo, one thread per rank, "
        "the same run.yaml and data for both; medians over alternating rounds, the first round discarded (it "
        "warms the page cache and the JVM's jar reads). Both launches are `python -m snakeddp.launch`; neither "
        "goes through Snakemake.",
        f"The cluster (a master and two 1-core workers, `python scripts/spark_cluster.py start`) took "
        f"{started_s:.1f} s to start and {stopped_s:.1f} s to stop, outside every figure: a cluster serves "
        "many runs. End to end, a run took "
        f"{wall['spark']:.1f} s through Spark and {wall['direct']:.1f} s direct.",
        "Where the fixed cost goes (medians; the rank's phases from rank 0's provenance.json): launch to rank 0's "
        f"process start {before['spark']:.1f} s through Spark (the driver's interpreter and imports, handing the "
        "run to the shared application, whose session (started once, in the discarded round, in "
        f"{median([d['session_s'] for d in spark]):.1f} s) runs the barrier stage, whose two tasks each fork "
        "their rank from their Python worker) vs "
        f"{before['direct']:.1f} s direct (`snakeddp.launch` and its supervisor, which imports torch and "
        "Lightning once and forks the ranks); the rank's own start to its first step (interpreter and imports, "
        "checks, Trainer, trainer.fit's rendezvous and first partition) "
        f"{phase(spark, 'startup_s'):.1f} s vs {phase(direct, 'startup_s'):.1f} s (imports "
        f"{phase(spark, 'imports_s'):.1f} s vs {phase(direct, 'imports_s'):.1f} s: both inherited their imports, "
        "from the executor's daemon or the supervisor); the last epoch to the "
        f"provenance record {phase(spark, 'teardown_s'):.2f} s vs {phase(direct, 'teardown_s'):.2f} s; and from "
        f"that record to the launch's exit {after['spark']:.1f} s vs {after['direct']:.1f} s (through Spark: the "
        "ranks' exit, the barrier stage's end and the driver's; direct: "
        "the ranks' exit and the supervisor's).",
        "Training throughput is the ranks' own: the same Lightning loop and gloo all-reduce over loopback, one "
        "thread per rank, whether a Spark task or snakeddp's supervisor forked the rank; the "
        "executors' JVMs sit idle while the ranks train (they and the driver only hold memory and answer "
        "heartbeats on the same 2 cores).",
        "What a run through Spark pays that the direct one does not is per run, not per epoch: since issue 46 "
        "no session (the workflow's one application holds it) and no torchrun or cold ranks (each task forks "
        "its rank from a worker of the executor's snakeddp.spark.daemon, which imported torch and Lightning "
        "once), but the driver's interpreter, handing the run over, the barrier stage (its tasks' workers, "
        "their meeting at the run's line server) and the rank's rendezvous across executors.",
    ]
