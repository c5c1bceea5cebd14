"""15. GPU training: snakeddp.train (Lightning DDP on a GPU) vs a hand-written DDP loop on the same GPU.

Needs a CUDA GPU, so it runs only where named (``python -m bench gpu``; tools/gpu-check.sh runs it on a
lent GPU machine). One rank on one GPU, the way ``snakemake --profile local`` trains a ``devices-1`` run:
ours through ``python -m snakeddp.launch`` (started cold, every import paid), the baseline under torchrun
with the same partitions, model, batch size and optimizer, each partition moved to the GPU whole, at
32-true and at bf16-mixed (torch.autocast, what Lightning's bf16-mixed does). The figures: samples per
second of training time (the wait for each epoch's partition included, validation excluded, the same
clock points as 4. Training overhead), and time to the first step (launch to the first step plus the last
epoch's end to exit: a run's fixed cost).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from bench import runs
from bench.datasets import data_config, ensure_dataset
from bench.harness import Context, Result, alternate, child_env, median, paired_ratio, target_figure

NAME = "gpu"
TITLE = "15. GPU training"
PRECISIONS = ("32-true", "bf16-mixed")


def run(ctx: Context) -> Result:
    sizes = ctx.sizes
    parts = sizes.partitions_or(2)
    epochs = 2 * parts
    hidden = [64] if sizes.tiny else [1024, 1024]
    batch_size = 1024
    data = data_config(sizes.records, sizes.features, min(sizes.val_records, 2000), parts)
    manifest = ensure_dataset(ctx.scratch("data"), data)
    run_dirs = (ctx.work / "runs" / f"{i}" / "run" for i in itertools.count())
    gpu_env = {k: v for k, v in child_env(threads=2).items() if k != "CUDA_VISIBLE_DEVICES"}

    def case(kind: str, precision: str) -> tuple[str, Callable[[], dict[str, float]]]:
        run_file = runs.run_file(data, hidden, epochs, batch_size, 1, accelerator="gpu", precision=precision)

        def measure() -> dict[str, Any]:
            if kind == "ours":
                out = runs.ours(run_file, manifest, next(run_dirs), env=gpu_env)
            else:
                out = runs.handwritten(run_file, manifest, next(run_dirs), env=gpu_env)
            return {"samples_per_s": runs.samples_per_s(out), "fixed_s": out["fixed_s"]}

        return f"{kind}_{precision}", measure

    cases = dict(case(kind, precision) for precision in PRECISIONS for kind in ("ours", "handwritten"))
    samples = alternate(cases, reps=sizes.reps_or(2), warmup=sizes.warmup_or(1))
    result = Result(
        NAME,
        TITLE,
        raw={"samples": samples},
        sizes={"partitions": parts, "epochs": epochs, "records": sizes.records, "features": sizes.features,
               "batch": batch_size, "mlp_hidden": hidden, "devices": 1},
    )  # fmt: skip
    for precision in PRECISIONS:
        ours, hand = samples[f"ours_{precision}"], samples[f"handwritten_{precision}"]
        result.figures.append(
            target_figure(
                f"gpu.{precision}.samples_per_s",
                f"training samples/s on one GPU, MLP {hidden}, {precision}",
                "samples/s",
                median([s["samples_per_s"] for s in ours]),
                baseline=median([s["samples_per_s"] for s in hand]),
                ratio=paired_ratio(ours, hand, "samples_per_s"),
                ratio_of="ours ÷ hand-written",
                op=">=",
                threshold=0.9,
            )
        )
        result.figures.append(
            target_figure(
                f"gpu.{precision}.first_step",
                f"time to the first step and from the last epoch to exit on one GPU, {precision}",
                "s",
                median([s["fixed_s"] for s in ours]),
                baseline=median([s["fixed_s"] for s in hand]),
                ratio=paired_ratio(ours, hand, "fixed_s"),
                ratio_of="ours ÷ hand-written",
                op="<=",
                threshold=1.5,
            )
        )
    result.notes.append(
        "Ours is started cold (`python -m snakeddp.launch`, every import paid), as a lent GPU machine's first run "
        "is; the local profile's warm process would take its imports off the fixed cost."
    )
    return result
