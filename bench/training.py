"""4. Training overhead: snakeddp.train (Lightning DDP) vs a hand-written DDP loop; 1 vs 2 processes.

Both are started by torchrun with one thread per process, train the same partitions with the
same model, batch size and optimizer (Adam), validate and checkpoint after every epoch. The
figure is samples per second of training time, the wait for each epoch's partition included
and validation excluded (``train_seconds`` + ``data_wait_s`` of metrics.csv for ours, the same
clock points in the baseline). The tutorial's one-layer model shows the per-step overhead; an
MLP with real compute per step shows the scaling, which a one-layer model cannot: on 2 CPU
cores its all-reduce and per-step costs outweigh the halved compute.
"""

from __future__ import annotations

import io
import itertools
import pstats
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import runs
from bench.datasets import data_config, ensure_dataset
from bench.harness import Context, Figure, Result, alternate, median, target_figure
from snakeddp import config as configuration

NAME = "training"
TITLE = "4. Training overhead"

# Where a Lightning training step's time goes: (file suffix, function) -> what it is.
STEP_PARTS = {
    ("snakeddp/models.py", "training_step"): "forward + loss + logging (`training_step`)",
    ("lightning/pytorch/core/module.py", "log"): "of which `self.log`",
    ("torch/autograd/__init__.py", "backward"): "backward, DDP's all-reduce included",
    ("torch/optim/adam.py", "adam"): "Adam's update",
    ("lightning/pytorch/loops/training_epoch_loop.py", "_broadcast_sigterm_tensor"): (
        "Lightning's per-step broadcast of the stop flag (one more collective)"
    ),
}


def step_profile(stats_file: Path, text_file: Path) -> tuple[float, dict[str, float]]:
    """Milliseconds per training step, in total and in each of STEP_PARTS, from rank 0's cProfile stats."""
    stats = pstats.Stats(str(stats_file))
    buffer = io.StringIO()
    pstats.Stats(str(stats_file), stream=buffer).sort_stats("cumulative").print_stats(
        "lightning|snakeddp|torch/(optim|autograd|distributed|nn)", 50
    )
    text_file.write_text(buffer.getvalue())
    found: dict[tuple[str, str], float] = {}
    steps = 0
    for (filename, _, function), (_, calls, _, cumulative, callers) in stats.stats.items():
        if filename.endswith("lightning/pytorch/loops/training_epoch_loop.py") and function == "advance":
            steps, found[("loop", "advance")] = calls, cumulative
        for suffix, name in STEP_PARTS:
            if filename.endswith(suffix) and function == name:
                # self.log is called by validation_step too: count the calls from training_step only.
                found[(suffix, name)] = (
                    sum(c[3] for (_, _, fn), c in callers.items() if fn == "training_step")
                    if name == "log"
                    else cumulative
                )
    if not steps:
        return 0.0, {}
    return found[("loop", "advance")] / steps * 1e3, {
        label: found[key] / steps * 1e3 for key, label in STEP_PARTS.items() if key in found
    }


def run(ctx: Context) -> Result:
    sizes = ctx.sizes
    parts = sizes.partitions_or(2)
    epochs = 2 * parts
    hidden = [16] if sizes.tiny else [512, 512]
    batch_size = configuration.validate({})["trainer"]["batch_size"]
    data = data_config(sizes.records, sizes.features, min(sizes.val_records, 2000), parts)
    manifest = ensure_dataset(ctx.scratch("data"), data)
    run_dirs = (ctx.work / "runs" / f"run-{i}" for i in itertools.count())
    details: dict[str, list[dict[str, Any]]] = {}

    def case(kind: str, model: list[int], devices: int) -> tuple[str, Callable[[], dict[str, float]]]:
        name = f"{kind}_{'mlp' if model else 'linear'}_{devices}"
        run_file = runs.run_file(data, model, epochs, batch_size, devices)
        start = runs.ours if kind == "ours" else runs.handwritten

        def measure() -> dict[str, float]:
            out = start(run_file, manifest, next(run_dirs))
            details.setdefault(name, []).append(out)
            return {"samples_per_s": runs.samples_per_s(out), "wall_s": out["wall_s"]}

        return name, measure

    cases = dict(
        case(kind, model, devices)
        for model, devices in (([], 2), (hidden, 2), (hidden, 1))
        for kind in ("ours", "handwritten")
    )
    samples = alternate(cases, reps=sizes.reps_or(3), warmup=sizes.warmup_or(0))
    rate = {name: median([s["samples_per_s"] for s in values]) for name, values in samples.items()}
    wall = {name: median([s["wall_s"] for s in values]) for name, values in samples.items()}
    result = Result(
        NAME,
        TITLE,
        raw={"samples": samples, "epochs": {k: [d["rows"] for d in v] for k, v in details.items()}},
        sizes={
            "partitions": parts,
            "epochs": epochs,
            "records": sizes.records,
            "features": sizes.features,
            "batch_per_process": batch_size,
            "mlp_hidden": hidden,
        },
    )
    mlp = f"MLP {hidden}"
    for model, label in (("linear", "the tutorial's linear model"), ("mlp", mlp)):
        for devices in (2, 1) if model == "mlp" else (2,):
            ours, hand = rate[f"ours_{model}_{devices}"], rate[f"handwritten_{model}_{devices}"]
            result.figures.append(
                target_figure(
                    f"train.{model}.{devices}",
                    f"training samples/s, {label}, {devices} process{'es' if devices > 1 else ''}",
                    "samples/s",
                    ours,
                    baseline=hand,
                    ratio=ours / hand,
                    ratio_of="ours ÷ hand-written",
                    op=">=",
                    threshold=0.9,
                )
            )
    efficiency = {kind: rate[f"{kind}_mlp_2"] / (2 * rate[f"{kind}_mlp_1"]) for kind in ("ours", "handwritten")}
    result.figures.append(
        Figure(
            "train.scaling",
            f"scaling efficiency 1 → 2 processes, {mlp} (samples/s ÷ 2 × one process)",
            "",
            efficiency["ours"],
            baseline=efficiency["handwritten"],
            limit=1.0,
            ratio=efficiency["ours"] / efficiency["handwritten"],
            ratio_of="ours ÷ hand-written",
        )
    )
    if any(f.met is False for f in result.figures):
        stats = runs.profiled_ours(runs.run_file(data, [], epochs, batch_size, 2), manifest, next(run_dirs))
        text = ctx.out / "profile-training-linear.txt"
        per_step, parts_ms = step_profile(stats, text)
        if per_step:
            result.notes.append(
                f"Where a step of ours goes (linear model, 2 processes, rank 0 under cProfile, which inflates "
                f"Python-heavy parts): {per_step:.1f} ms per step in Lightning's loop; "
                + "; ".join(f"{label} {ms:.2f} ms" for label, ms in parts_ms.items())
                + f". Full profile: bench/out/{text.name}."
            )
        result.raw["step_profile_ms"] = {"per_step": per_step, **parts_ms}
    result.notes += [
        f"{epochs} epochs over {parts} partitions, batch {batch_size} per process (the global batch grows with "
        "the processes), Adam, gloo, one thread per process, launched by torchrun (ours through "
        "`python -m snakeddp.launch`). Both validate and checkpoint after every epoch, outside the timed window.",
        "End to end (process start to exit, median): "
        + "; ".join(
            f"{label}: ours {wall[f'ours_{key}']:.1f} s, hand-written {wall[f'handwritten_{key}']:.1f} s"
            for key, label in (("linear_2", "linear ×2"), ("mlp_2", "MLP ×2"), ("mlp_1", "MLP ×1"))
        )
        + ". The difference is mostly start-up: importing Lightning and building the Trainer.",
        "The one-layer model is not used for the scaling figure: with 1,001 parameters a step is almost "
        "all per-step overhead and all-reduce latency, so two processes on two cores run barely faster "
        "than one (shared/notes/stack.md).",
    ]
    return result
