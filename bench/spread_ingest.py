"""Ingestion on the spark platform's executors (issue 74, item 4): the same table ingested by 1 and by 2
executors, and by the step alone (the local platform's ingestion), side by side in one run.

    python -m bench.spread_ingest [--rows 2097152] [--features 32] [--reps 2] [--record]

A Parquet folder of ``--rows`` rows x ``--features`` float32 columns and a 0/1 label, in 4 files of row groups of
65,536 rows (``--rows`` / 2^18 windows of the windowed split), on a local standalone cluster of two 1-core
workers (``scripts/spark_cluster.py start``, its start not counted). Each case is the ingest step as the data
rule runs it (``python -m snakeddp.steps ingest``) with the platform the workflow exports: ``spark`` with the
application capped at one core (``spark.cores.max: 1`` in the config's spark.conf: one executor) or not (two),
and ``local``. Figures: the step's wall time, and from its ingest.json the executors' part (the application's
start included) and the assembly (copying the pieces into the partitions, BLAKE3); the ratio is 2 executors
over 1, per round. ``--record`` puts them into bench 12's entry of results.json and rewrites results.md (bench
12's ``run`` measures them too, at its sizes).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import REPO, Figure, alternate, busy_note, child_env, median, paired_ratio

CLUSTER = REPO / "scripts" / "spark_cluster.py"
GROUP_ROWS = 1 << 16
FILES = 4
ROWS, FEATURES = 1 << 21, 32
TINY_ROWS, TINY_FEATURES = 1 << 19, 8  # --tiny: two windows of 8 columns


def sizes(tiny: bool) -> tuple[int, int]:
    """Rows and columns of the table: 8 windows of 32 columns (285 MB of values), or --tiny's."""
    return (TINY_ROWS, TINY_FEATURES) if tiny else (ROWS, FEATURES)


def write_table(folder: Path, rows: int, features: int, seed: int = 0) -> None:
    """The Parquet folder, one row group in memory at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    names = [f"x{i}" for i in range(features)]
    folder.mkdir(parents=True)
    per_file = -(-rows // FILES)
    schema = pa.schema([*((name, pa.float32()) for name in names), ("label", pa.int64())])
    for number in range(FILES):
        left = min(per_file, rows - number * per_file)
        with pq.ParquetWriter(folder / f"part-{number}.parquet", schema) as out:
            while left > 0:
                n = min(GROUP_ROWS, left)
                values = rng.standard_normal((n, features)).astype(np.float32)
                label = (values[:, 0] > 0).astype(np.int64)
                out.write_table(pa.table({**{name: values[:, j] for j, name in enumerate(names)}, "label": label}))
                left -= n


def params(table: Path, features: int) -> dict[str, Any]:
    return {
        "name": "bench",
        "source": "table",
        "seed": 0,
        "num_train_files": 8,
        "num_classes": 1,
        "table": {
            "path": str(table),
            "format": "auto",
            "features": [f"x{i}" for i in range(features)],
            "label": "label",
            "val_fraction": 0.1,
            "nan_policy": "error",
            "sha256": None,
        },
    }


def step(dataset: dict[str, Any], out: Path, **env: str) -> dict[str, float]:
    """The ingest step in a fresh process; its wall time and ingest.json's phases."""
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "snakeddp.steps", "ingest", "--params", json.dumps(dataset), "--out", str(out)]
    begun = time.perf_counter()
    done = subprocess.run(argv, env=child_env(**env), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - begun
    if done.returncode != 0:
        raise RuntimeError(f"the ingest step failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    summary = json.loads((out / "ingest.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    found = {"wall_s": wall, "readers": float(len({tuple(r) for r in summary.get("readers", [])}))}
    return found | {key: summary[key] for key in ("read_s", "pieces_s", "assemble_s") if key in summary}


def measure(work: Path, rows: int, features: int, reps: int) -> tuple[list[Figure], list[str], dict[str, Any]]:
    """The figures, notes and raw samples of the three cases on a fresh two-worker cluster."""
    cluster = work / "cluster"
    begun = time.perf_counter()
    subprocess.run([sys.executable, str(CLUSTER), "start", "--dir", str(cluster)], env=child_env(), check=True,
                   capture_output=True)  # fmt: skip
    started_s = time.perf_counter() - begun
    try:
        return measure_on(work, rows, features, reps, cluster / "conf", started_s)
    finally:
        subprocess.run([sys.executable, str(CLUSTER), "stop", "--dir", str(cluster)], env=child_env(), check=False,
                       capture_output=True)  # fmt: skip


def measure_on(
    work: Path, rows: int, features: int, reps: int, conf: Path, started_s: float
) -> tuple[list[Figure], list[str], dict[str, Any]]:
    """The three cases on the running two-worker cluster whose SPARK_CONF_DIR is ``conf`` (bench 12's own, its
    applications ended, or measure's), started in ``started_s``."""
    table = work / "table"
    write_table(table, rows, features)
    spark = {"SNAKEDDP_PLATFORM": "spark", "SPARK_CONF_DIR": str(conf)}
    one = json.dumps({"conf": {"spark.cores.max": 1}})
    dataset = params(table, features)
    samples = alternate(
        {
            "one": lambda: step(dataset, work / "out", **spark, SNAKEDDP_PLATFORM_SECTION=one),
            "two": lambda: step(dataset, work / "out", **spark, SNAKEDDP_PLATFORM_SECTION="{}"),
            "local": lambda: step(dataset, work / "out", SNAKEDDP_PLATFORM="local"),
        },
        reps=reps,
        warmup=0,
    )
    one_s, two_s = median([s["wall_s"] for s in samples["one"]]), median([s["wall_s"] for s in samples["two"]])
    pieces_ratio = paired_ratio(samples["two"], samples["one"], "pieces_s")
    figures = [
        Figure("spark.ingest_2_executors", "ingestion on 2 Spark executors (the step)", "s", two_s, one_s,
               median([s["wall_s"] for s in samples["local"]]), paired_ratio(samples["two"], samples["one"], "wall_s"),
               "2 executors / 1 executor"),
        Figure("spark.ingest_2_executors_pieces", "ingestion on 2 Spark executors: the pieces' reading", "s",
               median([s["pieces_s"] for s in samples["two"]]), median([s["pieces_s"] for s in samples["one"]]), None,
               pieces_ratio, "2 executors / 1 executor"),
    ]  # fmt: skip
    megabytes = rows * (features * 4 + 8) / 1e6
    phases = {
        case: [median([s[k] for s in samples[case]]) for k in ("read_s", "pieces_s", "assemble_s")]
        for case in ("one", "two")
    }
    readers = median([s["readers"] for s in samples["two"]])
    notes = [
        f"Ingestion on Spark executors (issue 74, item 4): {rows:,} rows x {features} float32 columns ({megabytes:.0f} "
        f"MB of values) in {FILES} Parquet files of {GROUP_ROWS:,}-row groups, {rows // (1 << 18)} windows, 8 "
        f"partitions, on a local standalone cluster of two 1-core workers (started in {started_s:.1f} s, not "
        "counted). The ingest step as the data rule runs it: `spark` with spark.cores.max 1 (one executor; "
        "'baseline' above) and without (two), and `local` (the step alone; 'limit' above). The executors' part "
        "includes the Spark application's start; the pieces' reading runs from the first task's start to the last "
        "one's end; the assembly (copying the pieces into the partitions, BLAKE3) "
        "runs in the step. Medians of "
        f"{reps} rounds: 1 executor {one_s:.1f} s (executors' part {phases['one'][0]:.1f}, of which the pieces' "
        f"reading {phases['one'][1]:.1f}; assembly {phases['one'][2]:.1f}), 2 executors {two_s:.1f} s "
        f"({phases['two'][0]:.1f}, {phases['two'][1]:.1f}; {phases['two'][2]:.1f}), the step alone "
        f"{median([s['wall_s'] for s in samples['local']]):.1f} s; the pieces were read by {readers:.0f} processes "
        f"with two executors. {busy_note() or ''}".strip()
    ]
    return figures, notes, {"spread_ingest": samples, "spread_ingest_rows": rows, "spread_ingest_features": features}


def record(figures: list[Figure], notes: list[str], raw: dict[str, Any]) -> None:
    """Into bench 12's entry of results.json (its other figures kept), and results.md rewritten from it."""
    from dataclasses import asdict

    from bench import report
    from bench.benchmarks import REGISTERED

    results = REPO / "bench" / "results.json"
    entry = report.load(results)["benchmarks"]["spark"]
    keys = {f.key for f in figures}
    entry["figures"] = [f for f in entry["figures"] if f["key"] not in keys] + [asdict(f) for f in figures]
    entry["notes"] = [n for n in entry["notes"] if not n.startswith("Ingestion on Spark executors")] + notes
    entry["raw"] = {**entry.get("raw", {}), **raw}
    report.write_markdown(REPO / "bench" / "results.md", report.merge(results, [entry], list(REGISTERED)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--features", type=int, default=FEATURES)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--record", action="store_true", help="into bench 12's entry of results.json and results.md")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="snakeddp-bench-spread-"))
    try:
        figures, notes, raw = measure(work, args.rows, args.features, args.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for figure in figures:
        print(f"{figure.label}: {figure.ours:.2f} s, 1 executor {figure.baseline:.2f} s, ratio {figure.ratio:.2f}")
    print(*notes, sep="\n")
    if args.record:
        record(figures, notes, raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
