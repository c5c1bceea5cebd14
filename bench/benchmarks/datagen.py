"""2. Data generation: the real snakemake data stage vs the generator's and the disk's limits.

Ours is ``snakemake <manifest>`` with the local profile (its cores) in a fresh directory: one job
per partition plus the validation set and the manifest, start-up included. The baseline is the
same generator and writer called in a loop by one plain Python process (the tutorial's
create_data.py, in our format). The limit is the slower of two: the generator alone
(synthetic.generate, no writing) spread over the cores, and writing the same bytes to disk
sequentially with an fsync per file.

The issue's target is for 1,000 partitions, where Snakemake's start-up no longer counts: each
round also runs the stage for 4x the partitions, and the difference between the two, per
partition, over the limit per partition is the ratio a dataset of many partitions approaches.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import time
from pathlib import Path

import yaml

from bench import runs
from bench.datasets import data_config
from bench.harness import (
    MB,
    REPO,
    Context,
    Result,
    alternate,
    child_env,
    median,
    paired_ratio,
    run_checked,
    target_figure,
)
from bench.workflows import Workflow
from snakeddp import config as configuration
from snakeddp.config import sources
from snakeddp.data import synthetic
from snakeddp.warm import preload

NAME = "datagen"
TITLE = "2. Data generation"
MANY = 4  # the larger run: this many times the partitions


def profile_cores() -> int:
    profile = yaml.safe_load((REPO / "profiles" / "local" / "config.yaml").read_text())
    return int(profile.get("cores", os.cpu_count() or 1))


def _bytes_under(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*.safetensors"))


def run(ctx: Context) -> Result:
    sizes = ctx.sizes
    parts = sizes.partitions_or(8)
    many = MANY * parts
    cores = profile_cores()
    data = data_config(sizes.records, sizes.features, sizes.val_records, parts)
    params = sources.identity(data)
    root = ctx.scratch("attempts")
    fresh = (root / f"attempt-{i}" for i in itertools.count())
    written: list[int] = []

    def stage(count: int) -> float:
        directory = next(fresh)
        config = {"data": {**data, "num_train_files": count}}
        target = f"results/data/{configuration.dataset_id(data)}/manifest-{count}.json"
        seconds, _ = Workflow(directory, config).timed("--cores", str(cores), target)
        if count == parts:
            written.append(_bytes_under(directory))
        shutil.rmtree(directory)
        return seconds

    def snakemake_stage() -> dict[str, float]:
        return {"s": stage(parts)}

    def snakemake_many() -> dict[str, float]:
        return {"s": stage(many)}

    def dry_run() -> dict[str, float]:
        directory = next(fresh)
        target = f"results/data/{configuration.dataset_id(data)}/manifest-{parts}.json"
        seconds, _ = Workflow(directory, {"data": data}).timed(target, "--dry-run", "--quiet", "rules")
        shutil.rmtree(directory)
        return {"s": seconds}

    def one_process_loop() -> dict[str, float]:
        directory = next(fresh)
        code = (
            "import json, sys, pathlib; from bench.datasets import ensure_dataset; "
            "ensure_dataset(pathlib.Path(sys.argv[1]), json.loads(sys.argv[2]))"
        )
        start = time.perf_counter()
        run_checked([sys.executable, "-c", code, str(directory), json.dumps(data)], env=child_env())
        seconds = time.perf_counter() - start
        shutil.rmtree(directory)
        return {"s": seconds}

    def one_step_process() -> dict[str, float]:
        # One data_partition job's own process, as the rule runs it, without Snakemake around it: forked
        # by a warm process (the local profile's jobs) and cold; and a cold interpreter's imports alone.
        directory = next(fresh)
        directory.mkdir()
        argv = [sys.executable, "-m", "snakeddp.steps", "partition", "--params", json.dumps(params), "--index", "0"]
        argv += ["--ingest=", "--out", str(directory / "p.safetensors"), "--entry", str(directory / "p.json")]
        times = {}
        for name, env in (("s", warm_env), ("cold_s", child_env())):
            start = time.perf_counter()
            run_checked(argv, env=env)
            times[name] = time.perf_counter() - start
        start = time.perf_counter()
        run_checked([sys.executable, "-c", "import snakeddp.steps, snakeddp.data.generate"], env=child_env())
        times["imports_s"] = time.perf_counter() - start
        shutil.rmtree(directory)
        return times

    def generator_only() -> dict[str, float]:
        start = time.perf_counter()
        synthetic.generate(params, "train", 0)
        middle = time.perf_counter()
        synthetic.generate(params, "val", 0)
        return {"train_s": middle - start, "val_s": time.perf_counter() - middle}

    file_bytes = 0

    def disk_write() -> dict[str, float]:
        directory = next(fresh)
        directory.mkdir()
        sizes_to_write = [file_bytes] * parts + [file_bytes * sizes.val_records // sizes.records]
        blob = os.urandom(max(sizes_to_write))
        start = time.perf_counter()
        for index, size in enumerate(sizes_to_write):
            with (directory / f"f{index}").open("wb") as handle:
                handle.write(memoryview(blob)[:size])
                handle.flush()
                os.fsync(handle.fileno())
        seconds = time.perf_counter() - start
        shutil.rmtree(directory)
        return {"s": seconds, "bytes": sum(sizes_to_write)}

    file_bytes = sum(a.nbytes for a in synthetic.generate(params, "train", 0).values())
    # The warm process of a data-only invocation, as the Snakefile starts it: what the data rules import, no torch
    # or Lightning (the default, every step's imports, held this benchmark 10 s for their import at load 7).
    with runs.warm_jobs(preload.for_rules(["data_partition", "data_val", "data_manifest"])) as warm_env:
        samples = alternate(
            {
                "snakemake": snakemake_stage,
                "snakemake_many": snakemake_many,
                "one_process": one_process_loop,
                "step_process": one_step_process,
                "generator": generator_only,
                "disk": disk_write,
                "dry_run": dry_run,
            },
            reps=sizes.reps_or(3),
            warmup=sizes.warmup_or(0),
        )
    rng_limits = [(parts * g["train_s"] + g["val_s"]) / cores for g in samples["generator"]]
    disk_limits = [d["s"] for d in samples["disk"]]
    bounds = [max(r, d) for r, d in zip(rng_limits, disk_limits, strict=True)]
    ours = median([s["s"] for s in samples["snakemake"]])
    plain = median([s["s"] for s in samples["one_process"]])
    bound = median(bounds)
    dry = median([s["s"] for s in samples["dry_run"]])
    total_bytes = written[-1] if written else 0
    result = Result(
        NAME,
        TITLE,
        raw={**samples, "rng_limit_s": rng_limits, "disk_limit_s": disk_limits, "bytes_written": written},
        sizes={"partitions": parts, "records": sizes.records, "features": sizes.features, "cores": cores},
    )
    result.figures.append(
        target_figure(
            "datagen.stage",
            f"snakemake data stage: {parts} partitions + validation set, {cores} cores",
            "s",
            ours,
            baseline=plain,
            limit=bound,
            ratio=median([s["s"] / b for s, b in zip(samples["snakemake"], bounds, strict=True)]),
            ratio_of="ours ÷ limit",
            op="<=",
            threshold=1.5,
        )
    )
    # Per partition beyond the first `parts`: Snakemake's start-up and the validation set cancel out.
    marginal = [
        (m["s"] - s_["s"]) / (many - parts)
        for m, s_ in zip(samples["snakemake_many"], samples["snakemake"], strict=True)
    ]
    per_partition_limits = [
        max(g["train_s"] / cores, d["s"] * file_bytes / d["bytes"])
        for g, d in zip(samples["generator"], samples["disk"], strict=True)
    ]
    result.figures.append(
        target_figure(
            "datagen.per_partition",
            f"snakemake data stage, each partition beyond {parts} (up to {many}): what 1,000 partitions approach",
            "s",
            median(marginal),
            limit=median(per_partition_limits),
            ratio=median([m / lim for m, lim in zip(marginal, per_partition_limits, strict=True)]),
            ratio_of="ours ÷ limit",
            op="<=",
            # Issue 33's target, with jobs forked warm (the data issue asked 1.5 of cold jobs, and missed).
            threshold=2.0,
        )
    )
    jobs = parts + 2
    generate_s = median([g["train_s"] for g in samples["generator"]])
    rng_rate = file_bytes / MB / generate_s
    disk_rate = samples["disk"][0]["bytes"] / MB / median(disk_limits)
    # Core-seconds each partition costs beyond the first `parts`, and its job's own process.
    per_partition_core_s = median(marginal) * cores
    step = median([c["s"] for c in samples["step_process"]])
    cold_step = median([c["cold_s"] for c in samples["step_process"]])
    imports = median([c["imports_s"] for c in samples["step_process"]])
    result.notes += [
        f"{total_bytes / MB:,.0f} MB written in {jobs} jobs for {parts} partitions. Limits: the generator makes "
        f"{rng_rate:,.0f} MB/s on one core ({generate_s:.2f} s a partition; {median(rng_limits):.2f} s for "
        f"everything on {cores} cores); the disk takes {disk_rate:,.0f} MB/s sequentially with fsync "
        f"({median(disk_limits):.2f} s). Baseline: one plain Python process looping over the same generator and "
        f"writer, {plain:.1f} s ({paired_ratio(samples['one_process'], samples['snakemake'], 's'):.2f}× ours).",
        f"With {parts} partitions, Snakemake's start-up dominates: `snakemake -n` of the same target takes "
        f"{dry:.1f} s (start-up, config validation, DAG). The second row is the issue's 1,000-partition case "
        f"without generating 40 GB: the stage for {many} partitions minus the stage for {parts}, per partition, "
        f"{median(marginal):.3f} s on {cores} cores ({per_partition_core_s:.2f} s of a core), against the "
        "limit per partition.",
        f"Where a partition's {per_partition_core_s:.2f} core-seconds go: its job's process (`python -m "
        f"snakeddp.steps partition`, run alone) takes {step:.2f} s forked by the workflow's warm process (the "
        f"local profile's default, snakeddp.warm), against {cold_step:.2f} s cold, of which {imports:.2f} s is "
        f"the interpreter and its imports (numpy is most of it); the rest is generating ({generate_s:.2f} s in "
        "a process that has generated before, as the limit measures it; more in a fresh one, whose memory is "
        "new), hashing and writing with fsync. The remainder is two jobs at a time sharing "
        f"{cores} cores and one disk, and Snakemake's own work per job (scheduling, shell, output checks, "
        "metadata: about 15 ms a job in a workflow of trivial shell jobs here).",
        "Fixed here: a data job joined the partition's arrays into one blob before writing and hashing it "
        "(tobytes and join: the partition three times in memory) and converted all features to float64 at once "
        "for the teacher's logits. It now writes and hashes the arrays piece by piece and computes the logits "
        "4 MB of rows at a time: a 40 MB partition's job peaked at 153 MB RSS and now at 79 MB (33 MB of it "
        "imports), 0.36 -> 0.30 s (6 runs each, medians). The bytes are unchanged (tests/data/test_synthetic.py pins "
        "the BLAKE3 of files written before). Earlier: `snakeddp.data.partitions` no longer imports torch.",
        "Fixed in stop 40 (issue 33): the warm process of a data-only invocation imports no torch or Lightning "
        "(snakeddp.warm.preload: what the pending jobs' rules import), which took a core from the data jobs for "
        "2-3 s; Snakemake's exit no longer waits for the warm process to finish an import (this stage for 8 "
        "partitions took 6.2-6.5 s in two rounds of three, 4.0 s in the third, and earlier 4.7 s); a job's exit "
        "no longer undoes torch's operator libraries (snakeddp.util.shutdown), and blake3 is preloaded: a trivial "
        "step forked warm took 87 ms, now 55 ms, a partition's job 214 ms, now 185 ms (the same job against the "
        "previous commit's warm process, alternating, medians of 8-12 rounds).",
    ]
    if any(figure.met is False for figure in result.figures):
        result.notes.append(
            f"What is left: a job's own work is {step / generate_s:.1f}× the limit's generator, which neither hashes "
            "nor waits for the disk. Traced (strace of the warm process, one job): generating 85 ms (as the limit "
            "once the first fork has paged in numpy's code), writing 10 ms, fsync 16 ms (the core idle), hashing "
            "and the entry 10 ms; around them the client's start and hand-off (25 ms), the fork (10 ms) and the "
            "exit (11 ms of the kernel freeing the forked address space). Snakemake's work per job comes on top: "
            "35 ms of its CPU (py-spy of a 32-partition stage: scheduling with its ILP solver, the shell, output "
            "checks, metadata). At this partition size one job per partition stays above 2× (the 8-partition "
            "row is Snakemake's start-up). Several partitions "
            "per job was weighed again and not done: a Snakemake job has a fixed list of outputs, deleted before "
            "it runs, so a job of K partitions rewrites all K when one is missing; one whose outputs are only the "
            "missing partitions (planned when the workflow starts) changes the recorded inputs of the partitions "
            "it placed, and Snakemake reruns a job whose set of inputs changed. Both break promises the README "
            "makes (one missing partition regenerates alone; more partitions generate only the new files). Next "
            "step: larger partitions, which spread a job's fixed cost over more bytes (the tutorial's 40 MB is "
            "small for a cluster)."
        )
    return result
