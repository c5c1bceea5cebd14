"""5. Memory: peak RSS of each training process, against what it must hold and the tutorial's way.

A training process must hold the model and optimizer state, the current partition, the one
being prefetched and the validation set, on top of what ``import torch, lightning`` costs
before any work. Peak RSS is the kernel's high-water mark (VmHWM) of each rank, read while it
runs (psutil walks the launcher's process tree every 20 ms; the RSS series is kept too).
Runs with 2 partitions for 2 epochs and with more partitions for as many epochs show whether
memory grows with partitions or epochs. The baseline is the hand-written DDP loop reading the
tutorial's pickled partitions: the validation set plus one unpickled partition per epoch, the
previous one still referenced while the next loads (as in the tutorial's DataModule).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

from bench import runs
from bench.baselines.tutorial import write_pickle
from bench.datasets import data_config, ensure_dataset
from bench.harness import MB, Context, Result, alternate, child_env, median, run_checked, target_figure
from snakeddp.data.partitions import load_manifest, read_partition

NAME = "memory"
TITLE = "5. Memory"

# One fresh process, its RSS after `import torch`, then after Lightning on top: the same bytes as a fresh process
# importing both (within 0.3 MB here), for one interpreter and one torch import (1.7 s of CPU) instead of two. Its
# imports frozen once it has printed: its exit's last collection (0.8 s of CPU) is no part of what it measures.
FOOTPRINT_CODE = (
    "import torch, psutil; print(psutil.Process().memory_info().rss); "
    "import lightning; print(psutil.Process().memory_info().rss); import gc; gc.freeze()"
)


def import_footprints() -> dict[str, int]:
    """RSS of a fresh process right after importing torch, and after importing torch and Lightning."""
    torch_only, both = run_checked([sys.executable, "-c", FOOTPRINT_CODE], env=child_env()).split()[-2:]
    return {"torch": int(torch_only), "torch, lightning": int(both)}


def write_tutorial_pickles(manifest_path: Path) -> None:
    """The tutorial's pickled partitions (data{i}.pt) and val.pt, from the same tensors as ours."""
    manifest = load_manifest(manifest_path)
    root = manifest_path.parent
    for entry in [*manifest["train"], manifest["val"]]:
        path = root / entry["file"]
        if not path.with_suffix(".pt").is_file():
            partition = read_partition(path)
            write_pickle(path.with_suffix(".pt"), partition.features.clone(), partition.labels.clone())


def _peaks(trace: runs.MemoryTrace) -> list[int]:
    return [trace.peak(pid) for pid in sorted(trace.hwm or trace.samples)]


def run(ctx: Context) -> Result:
    sizes = ctx.sizes
    many = max(sizes.partitions_or(6), 3)
    data_many = data_config(sizes.records, sizes.features, sizes.val_records, many)
    data_few = {**data_many, "num_train_files": 2}
    root = ctx.scratch("data")
    manifest_many, manifest_few = ensure_dataset(root, data_many), ensure_dataset(root, data_few)
    write_tutorial_pickles(manifest_many)
    batch_size = 128
    # Each run directory alone under its parent: beside another one of the same key, a launch restores
    # that finished attempt (snakeddp.provenance.lineage) and trains nothing.
    run_dirs = (ctx.work / "runs" / f"{i}" / "run" for i in itertools.count())
    traces: dict[str, list[runs.MemoryTrace]] = {"ours_few": [], "ours_many": [], "tutorial_many": []}

    def case(name: str) -> Any:
        def measure() -> dict[str, float]:
            trace = runs.MemoryTrace(period=0.1 if sizes.tiny else 0.02)  # --tiny: its samples' CPU a fifth
            if name == "tutorial_many":
                run_file = runs.run_file(data_many, [], many, batch_size, devices=2)
                runs.handwritten(run_file, manifest_many, next(run_dirs), fmt="pickle", trace=trace)
            else:
                data, manifest = (data_few, manifest_few) if name == "ours_few" else (data_many, manifest_many)
                run_file = runs.run_file(data, [], data["num_train_files"], batch_size, devices=2)
                runs.ours(run_file, manifest, next(run_dirs), trace=trace)
            traces[name].append(trace)
            return {"peak_bytes": max(_peaks(trace))}

        return measure

    footprints: dict[str, list[int]] = {"torch, lightning": [], "torch": []}

    def footprint() -> dict[str, float]:
        for modules, rss in import_footprints().items():
            footprints[modules].append(rss)
        return {}

    samples = alternate(
        {"ours_few": case("ours_few"), "ours_many": case("ours_many"), "tutorial_many": case("tutorial_many")}
        | {"footprint": footprint},
        reps=sizes.reps_or(2),
        warmup=sizes.warmup_or(0),
    )
    manifest = load_manifest(manifest_many)
    partition = max(entry["bytes"] for entry in manifest["train"])
    val = manifest["val"]["bytes"]
    model_state = (sizes.features + 1) * 4 * 4  # weights, gradients, Adam's two moments (float32)
    needed = model_state + 2 * partition + val
    bare = median(footprints["torch, lightning"])
    peak = {name: median([s["peak_bytes"] for s in values]) for name, values in samples.items() if name in traces}
    growth = peak["ours_many"] - peak["ours_few"]
    result = Result(
        NAME,
        TITLE,
        raw={
            "samples": samples,
            "footprints": footprints,
            "per_rank_peaks": {k: [_peaks(t) for t in v] for k, v in traces.items()},
            "rss_series": {k: [t.samples for t in v[:1]] for k, v in traces.items()},
            "partition_bytes": partition,
            "val_bytes": val,
            "model_state_bytes": model_state,
        },
        sizes={"partitions": f"2 and {many}", "records": sizes.records, "features": sizes.features},
    )
    result.figures += [
        target_figure(
            "memory.peak",
            f"peak RSS per training process, linear model, 2 processes, {many} partitions × {many} epochs",
            "MB",
            peak["ours_many"] / MB,
            baseline=peak["tutorial_many"] / MB,
            limit=(needed + bare) / MB,
            ratio=(peak["ours_many"] - bare) / needed,
            ratio_of="(ours − bare import) ÷ (model + optimizer + 2 partitions + val)",
            op="<=",
            threshold=1.2,
        ),
        target_figure(
            "memory.growth",
            f"peak RSS growth from 2 partitions × 2 epochs to {many} × {many}",
            "MB",
            growth / MB,
            ratio=growth / partition,
            ratio_of="growth ÷ one partition",
            op="<=",
            threshold=0.25,
        ),
    ]
    torch_only = median(footprints["torch"])
    result.notes += [
        f"What a process must hold: partition {partition / MB:.1f} MB (×2: current + prefetched), validation set "
        f"{val / MB:.1f} MB, model + Adam state {model_state / 1e3:.0f} kB; bare `import torch, lightning` "
        f"{bare / MB:.0f} MB RSS (`import torch` alone {torch_only / MB:.0f} MB). Limit column = their sum.",
        f"Flat across epochs and partitions: peak {peak['ours_few'] / MB:.0f} MB after 2 partitions × 2 epochs, "
        f"{peak['ours_many'] / MB:.0f} MB after {many} × {many} (largest rank, median of the runs).",
        f"Tutorial's way (hand-written loop, pickled partitions, no Lightning import): peak "
        f"{peak['tutorial_many'] / MB:.0f} MB, {(peak['tutorial_many'] - torch_only) / MB:.0f} MB above its bare "
        f"`import torch`; ours is {(peak['ours_many'] - bare) / MB:.0f} MB above `import torch, lightning`.",
        "Per-rank peaks of every run are in results.json (`per_rank_peaks`), with one RSS series per case.",
    ]
    if result.figures[0].met is False:
        result.notes.append(
            "Peak above the bound: RSS counts every touched page of the memory-mapped partitions and validation "
            "set, the sha256 read buffer (8 MB) and the gloo/DDP buffers; compare per_rank_peaks and the RSS "
            "series in results.json to see when the peak happens (start-up, a switch, validation)."
        )
    if result.figures[1].met is False:
        result.notes.append(
            "Memory grows with partitions or epochs: some object keeps old partitions alive (a dataloader, a "
            "trace, the prefetcher's futures). The RSS series in results.json shows where it climbs."
        )
    return result
