"""13. Images: decoding in the data stage, and training on image partitions.

- **Decoding.** scikit-learn's digits written as PNG files in class folders (bench.digits), ingested by
  ``snakeddp.data.table.ingest`` in a fresh process (decoding, the split, writing and checksumming the
  uint8 partitions): images per second, against Pillow decoding the same files in one loop (open, load,
  convert to L, as a numpy array): the floor any decoder pays. The ingestion's peak RSS is reported with
  the partition size, against the process that only imports what ingestion imports.
- **Training.** The cnn (``model.name: cnn``, width 16) on those partitions through ``PartitionDataModule``
  (one partition per epoch, uint8 scaled and standardised per batch), against the same images held in
  memory as float tensors already standardised; the same Lightning loop, one process and thread,
  alternated rounds, medians.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import digits
from bench.benchmarks.ingest_memory import peak_rss
from bench.harness import Context, Figure, Result, alternate, busy_note, median, paired_ratio

NAME = "images"
TITLE = "13. Images: decoding and training"
PARTITIONS = 4
_INGEST = "from snakeddp.data.table import ingest; import json, sys; ingest(json.loads(sys.argv[1]), sys.argv[2])"
# What ingesting a folder of images imports (pandas and pyarrow are imported only for tables).
_IMPORTS = "import numpy, PIL.Image, snakeddp.data.table"


def params(folder: Path) -> dict[str, Any]:
    table = {"path": str(folder), "format": "auto", "features": [], "label": "label", "val_fraction": 0.2}
    return {
        "name": "digits",
        "source": "table",
        "seed": 0,
        "num_train_files": PARTITIONS,
        "num_classes": digits.CLASSES,
        "table": {**table, "nan_policy": "error", "sha256": None},
        "image": {"channels": 1},
    }


def pillow_loop(files: list[Path]) -> float:
    """Seconds for Pillow alone to decode every file to an 8-bit array."""
    from PIL import Image

    start = time.perf_counter()
    for path in files:
        with Image.open(path) as image:
            np.asarray(image.convert("L"))
    return time.perf_counter() - start


def dataset(work: Path, folder: Path) -> Path:
    """The partitions ingested at their final paths, as the data rules ingest them, with their manifest."""
    from snakeddp.data.generate import write_dataset_manifest
    from snakeddp.data.table import ingest

    data = work / "dataset"
    shutil.rmtree(data, ignore_errors=True)
    ingest(params(folder), data)
    entries = [data / "train" / f"part-{index:05d}.json" for index in range(PARTITIONS)]
    manifest = data / f"manifest-{PARTITIONS}.json"
    write_dataset_manifest(manifest, "digits", params(folder), entries, data / "val.json")
    return manifest


def training(manifest: Path, reps: int, warmup: int) -> dict[str, list[dict[str, float]]]:
    import torch

    from bench.benchmarks.input_pipeline import InMemoryDataModule, fit
    from snakeddp.data.augment import ImageBatches
    from snakeddp.data.module import PartitionDataModule
    from snakeddp.data.partitions import load_manifest, read_partition

    loaded = load_manifest(manifest)
    task, root = loaded["task"], manifest.parent
    standardise = ImageBatches(task, {}, seed=0)
    in_memory = []
    for entry in loaded["train"]:
        partition = read_partition(root / entry["file"], entry)
        in_memory.append((standardise(partition.features, partition.ids, 0, False), partition.labels.clone()))
    model = {"name": "cnn", "optimizer": "adam", "lr": 0.003, "weight_decay": 0.0, "width": 16, "depth": 2}
    epochs = 2 * PARTITIONS

    def case(key: str) -> Any:
        def measure() -> dict[str, float]:
            module = (
                InMemoryDataModule(in_memory, 64, seed=0)
                if key == "in_memory"
                else PartitionDataModule(manifest, 64, seed=0)
            )
            out = fit(module, task, epochs, manifest.parent / f"metrics-{key}", model=model)
            return {"samples_per_s": out["samples_per_s"]}

        return measure

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return alternate({key: case(key) for key in ("in_memory", "ours")}, reps=reps, warmup=warmup)
    finally:
        torch.set_num_threads(threads)


def run(ctx: Context) -> Result:
    count = 300 if ctx.sizes.tiny else None
    folder = digits.write_folder(Path(ctx.work) / "digits", count=count)
    files = sorted(folder.rglob("*.png"))
    reps = ctx.sizes.reps_or(5)
    floors, ours, rss = [], [], []
    for _ in range(reps):
        floors.append(pillow_loop(files))
        out = Path(ctx.work) / "out"
        shutil.rmtree(out, ignore_errors=True)
        peak, seconds = peak_rss(_INGEST, json.dumps(params(folder)), str(out))
        ours.append(seconds)
        rss.append(peak)
    partition_mb = json.loads((out / "train" / "part-00000.json").read_text())["bytes"] / 1e6
    imports_mb, imports_s = peak_rss(_IMPORTS)
    decode_rate, floor_rate = len(files) / median(ours), len(files) / median(floors)
    samples = training(dataset(Path(ctx.work), folder), ctx.sizes.reps_or(3), ctx.sizes.warmup_or(1))
    rates = {key: median([s["samples_per_s"] for s in value]) for key, value in samples.items()}
    result = Result(
        NAME,
        TITLE,
        raw={"ingest_s": ours, "pillow_s": floors, "ingest_rss_mb": rss, "imports_s": imports_s, **samples},
        sizes={"images": len(files), "size": "8x8", "partitions": PARTITIONS},
    )
    result.figures = [
        Figure(
            "images.decode",
            f"images/s ingesting {len(files):,} PNG files in class folders into {PARTITIONS} partitions + val",
            "images/s",
            decode_rate,
            baseline=floor_rate,
            ratio=decode_rate / floor_rate,
            ratio_of="ours (whole ingestion, a fresh process) ÷ Pillow's decode loop",
        ),
        Figure(
            "images.decode_net",
            "the same, less the process's start and imports (ingestion's own work)",
            "images/s",
            len(files) / max(median(ours) - imports_s, 1e-9),
            baseline=floor_rate,
            ratio=len(files) / max(median(ours) - imports_s, 1e-9) / floor_rate,
            ratio_of="ours ÷ Pillow's decode loop",
        ),
        Figure(
            "images.rss",
            f"ingestion's peak RSS (a partition is {partition_mb:.2f} MB)",
            "MB",
            median(rss),
            baseline=imports_mb,
            ratio=median(rss) / imports_mb,
            ratio_of="peak RSS ÷ the imports alone",
        ),
        Figure(
            "images.train",
            f"cnn samples/s over {2 * PARTITIONS} epochs of {PARTITIONS} image partitions",
            "samples/s",
            rates["ours"],
            baseline=rates["in_memory"],
            ratio=paired_ratio(samples["ours"], samples["in_memory"], "samples_per_s"),
            ratio_of="ours ÷ the same images in memory, standardised",
        ),
    ]
    result.notes = [
        f"Decoding: {len(files):,} real 8x8 PNGs (scikit-learn's digits); Pillow's loop took {median(floors):.2f} s, "
        f"ingestion {median(ours):.2f} s in a fresh process whose start and imports alone take {imports_s:.2f} s. "
        "Per image ingestion also splits, writes and checksums (BLAKE3) what it decoded. No target in the issue.",
        "Training: one process and thread, batch 64, the cnn at width 16 and depth 2; ours reads each epoch's "
        "partition from disk (checksummed once) and scales and standardises uint8 batches as they leave it, the "
        f"baseline holds float tensors already standardised. In-memory: {rates['in_memory']:,.0f} samples/s.",
    ]
    note = busy_note()
    if note:
        result.notes.append(note)
    return result
