"""14. A wide table, one pass: the AzureML tutorial's "millions of samples with thousands of features", tried
as a new user would.

    python -m bench wide_table                     # 200,000 rows x 1,000 float32 features (0.8 GB), 8 files
    python -m bench.benchmarks.wide_table --rows 1000000 --limit-mb 3072 --out bench/wide_table_issue_scale.json
                                                   # the issue's scale (5.9 GB of Parquet, 4 GB float32, a 3 GB
                                                   # cgroup): minutes here; its record is quoted in section 14

A Parquet folder of ``rows`` x 1,000 float32 features and a 0/1 label in 8 files, trained through
``snakemake --profile local`` from an empty directory with no feature list (every column but the label):
16 partitions, one pass over them (``trainer.max_epochs: 16``), ``launch.devices: 1``, the whole workflow
in a cgroup v1 memory limit (``--limit-mb``; where the machine has none, unlimited, and the note says so).
Against it, measured in the same run: pyarrow reading the 8 files (``pyarrow.parquet.read_table``, all
columns, its threads) and the seconds ``trainer.fit`` took (the run's provenance, ``timing.duration_s``).
The target is the issue's: the whole pass at most 1.5x their sum. Ingestion alone is timed again in a
fresh process (its wall time and peak RSS) to say where the rest went.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.benchmarks.ingest_memory import peak_rss
from bench.harness import REPO, Context, Figure, Result, busy_note, child_env, run_checked, target_figure
from bench.workflows import Workflow
from snakeddp.util.fsutil import atomic_write_json, read_json

NAME = "wide_table"
TITLE = "14. Wide table, one pass"
FEATURES, FILES, PARTITIONS = 1000, 8, 16
# The issue's 3 GB for 5.7 GB of Parquet, about halved for this table (1.2 GB): ingestion holds a row group.
LIMIT_MB = 1500
CGROUP = Path("/sys/fs/cgroup/memory")
# The issue's scale, measured by this module's command line (--out): section 14 quotes it.
ISSUE_SCALE = REPO / "bench" / "wide_table_issue_scale.json"
_INGEST = "from snakeddp.data.table import ingest; import json, sys; ingest(json.loads(sys.argv[1]), sys.argv[2])"


def write_table(folder: Path, rows: int, seed: int = 0) -> None:
    """``FILES`` Parquet files of float32 columns c0..c999 and a label y learnable from ten of them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_file = rows // FILES
    for index in range(FILES):
        features = rng.standard_normal((per_file, FEATURES), dtype=np.float32)
        columns = {f"c{j}": features[:, j] for j in range(FEATURES)}
        columns["y"] = (features[:, :10].sum(axis=1) > 0).astype(np.int64)
        pq.write_table(pa.table(columns), folder / f"part-{index:02d}.parquet")


def pyarrow_read(folder: Path) -> tuple[float, float]:
    """Seconds of wall time and of CPU (every thread's) for pyarrow to read the table's files."""
    import pyarrow.parquet as pq

    start, cpu = time.perf_counter(), time.process_time()
    for path in sorted(folder.glob("*.parquet")):
        pq.read_table(path)
    return time.perf_counter() - start, time.process_time() - cpu


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def config(folder: Path) -> dict[str, Any]:
    return {
        "data": {
            "name": "wide",
            "source": "table",
            "num_train_files": PARTITIONS,
            "table": {"path": str(folder), "label": "y", "val_fraction": 0.02},
        },
        "trainer": {"max_epochs": PARTITIONS, "batch_size": 1024, "early_stopping": {"enabled": False}},
        "launch": {"devices": 1, "accelerator": "cpu"},
    }


def limited(command: list[str], limit_mb: int | None, name: str) -> tuple[list[str], Path | None]:
    """``command`` run inside a new cgroup v1 memory group of ``limit_mb`` (None: no limit, or none here)."""
    if limit_mb is None or not os.access(CGROUP, os.W_OK):
        return command, None
    group = CGROUP / name
    group.mkdir(exist_ok=True)
    (group / "memory.limit_in_bytes").write_text(str(limit_mb * 1 << 20))
    quoted = " ".join(json.dumps(part) for part in command)
    return ["sh", "-c", f"echo $$ > {group}/cgroup.procs && exec {quoted}"], group


# The workflow's phases in order, each ended by when the files of this pattern were last written (None: the end).
PHASES = (
    ("start, plan, environment records and ingestion", "logs/data/*/ingest.log"),
    ("placing the partitions and the manifest", "results/data/*/manifest-*.json"),
    ("the train job (trainer.fit and its start and end)", "results/runs/*/provenance.json"),
    ("the report, and snakemake's end", None),
)


def phases(run: Path, start: float, end: float) -> dict[str, float]:
    """Where the workflow's time went, from when its stages' files were last written (wall-clock seconds)."""
    clock = time.time() - time.perf_counter()  # perf_counter's start on the file system's clock

    def at(pattern: str | None) -> float:
        return end if pattern is None else max(p.stat().st_mtime for p in run.glob(pattern)) - clock

    out, previous = {}, start
    for name, pattern in PHASES:
        mark = at(pattern)
        out[name], previous = round(mark - previous, 1), mark
    return out


def measure(work: Path, rows: int, limit_mb: int | None) -> dict[str, Any]:
    table = work / "table"
    if not table.is_dir():
        write_table(table, rows)
    result: dict[str, Any] = {"rows": rows, "features": FEATURES, "files": FILES, "partitions": PARTITIONS}
    result["table_mb"] = sum(p.stat().st_size for p in table.glob("*.parquet")) / 1e6
    result["pyarrow_read_s"], result["pyarrow_read_cpu_s"] = pyarrow_read(table)
    shutil.rmtree(work / "run", ignore_errors=True)
    workflow = Workflow(work / "run", config(table))
    command, group = limited(workflow.command(), limit_mb, f"snakeddp-bench-{os.getpid()}")
    start = time.perf_counter()
    try:
        run_checked(command, cwd=workflow.directory, env=child_env())
        result["workflow_s"] = time.perf_counter() - start
        if group is not None:
            result["max_usage_mb"] = int((group / "memory.max_usage_in_bytes").read_text()) / 1e6
            result["failcnt"] = int((group / "memory.failcnt").read_text())
    finally:
        if group is not None:
            group.rmdir()
    result["phases_s"] = phases(work / "run", start, start + result["workflow_s"])
    (record,) = [json.loads(p.read_text()) for p in (work / "run").glob("results/runs/*/provenance.json")]
    result["fit_s"] = record["timing"]["duration_s"]
    result["best_val_acc"] = record["training"]["best_val_acc"]
    result["features_resolved"] = len(record["config"]["data"]["table"]["features"])
    result["pyarrow_read_again_s"] = pyarrow_read(table)[0]
    params = {
        "name": "wide",
        "source": "table",
        "seed": 0,
        "num_train_files": PARTITIONS,
        "num_classes": 1,
        "table": {**record["config"]["data"]["table"], "sha256": None},
    }
    out = work / "ingest"
    shutil.rmtree(out, ignore_errors=True)
    cpu = _children_cpu()
    result["ingest_rss_mb"], result["ingest_s"] = peak_rss(_INGEST, json.dumps(params), str(out))
    result["ingest_cpu_s"] = _children_cpu() - cpu
    result["partition_mb"] = json.loads((out / "train" / "part-00000.json").read_text())["bytes"] / 1e6
    shutil.rmtree(out, ignore_errors=True)
    return result


def run(ctx: Context) -> Result:
    rows = 2_000 if ctx.sizes.tiny else 200_000
    m = measure(Path(ctx.work), rows, limit_mb=None if ctx.sizes.tiny else LIMIT_MB)
    read = min(m["pyarrow_read_s"], m["pyarrow_read_again_s"])
    floor = read + m["fit_s"]
    result = Result(NAME, TITLE, raw=m, sizes={"rows": rows, "features": FEATURES, "files": FILES})
    result.figures = [
        target_figure(
            "wide_table.pass",
            f"snakemake --profile local from an empty directory: {rows:,} rows x {FEATURES} features, "
            f"{PARTITIONS} partitions, one pass",
            "s",
            m["workflow_s"],
            baseline=floor,
            ratio=m["workflow_s"] / floor,
            ratio_of="ours ÷ (pyarrow's read + trainer.fit)",
            op="<=",
            threshold=1.5,
        ),
        Figure(
            "wide_table.ingest",
            "ingestion alone (data_table's pass), in a fresh process",
            "s",
            m["ingest_s"],
            baseline=read,
            ratio=m["ingest_s"] / read,
            ratio_of="ingestion ÷ pyarrow's read",
        ),
        Figure(
            "wide_table.ingest_rss",
            f"ingestion's peak RSS (a partition is {m['partition_mb']:.0f} MB)",
            "MB",
            m["ingest_rss_mb"],
            baseline=m["table_mb"],
            ratio=m["ingest_rss_mb"] / m["table_mb"],
            ratio_of="peak RSS ÷ the table's Parquet size",
        ),
    ]
    usage = (
        f"The whole workflow ran in a cgroup limited to {LIMIT_MB:,} MiB ({LIMIT_MB * 2**20 / 1e6:,.0f} MB), page "
        f"cache included: it used {m['max_usage_mb']:,.0f} MB at most, the page cache of the table and the "
        f"partitions filling the limit and being reclaimed ({m['failcnt']:,} times), and finished"
        if "max_usage_mb" in m
        else "No memory limit (the tiny run, or no writable cgroup v1 memory controller here)"
    )
    result.notes = [
        f"The table: {m['table_mb']:,.0f} MB of Parquet in {FILES} files; features left out of the config, resolved "
        f"to {m['features_resolved']} when the workflow planned. pyarrow read it in {read:.1f} s (the faster of two "
        f"reads, before and after the workflow), trainer.fit took {m['fit_s']:.1f} s (best val_acc "
        f"{m['best_val_acc']:.3f}), the whole workflow {m['workflow_s']:.1f} s: snakemake's start, the plan, "
        f"ingestion ({m['ingest_s']:.1f} s alone), placing {PARTITIONS} partitions, the environment record, "
        f"training and the report. {usage}.",
        f"The issue's scale is 1,000,000 rows (5.7 GB, a 3 GB cgroup); this is {rows / 1e6:.1f} of it, which this "
        "2-core machine, shared with other engineers' test runs, holds in minutes: python -m "
        "bench.benchmarks.wide_table --rows 1000000 --limit-mb 3072 --out bench/wide_table_issue_scale.json runs "
        "the issue's.",
    ]
    if result.figures[0].met is False:
        phased = "; ".join(f"{name} {seconds:.1f} s" for name, seconds in m["phases_s"].items())
        result.notes.append(
            f"Why it misses, phase by phase (from when each stage's files were written): {phased}. Ingestion is "
            f"{m['ingest_s'] / read:.1f}x pyarrow's read: it decodes each row group in one call, lays the 1,000 "
            "columns out as rows a block at a time (Arrow's RecordBatch.to_tensor measured no faster), writes "
            "every partition in place (no spill) on a thread beside the decoding, then syncs the partitions and "
            "reads them back once for their BLAKE3, where pyarrow's read writes nothing. "
            f"{floor_note(m, read)} The rest is fixed cost on this 2-core machine under other "
            "engineers' load: snakemake's start (its own imports and plugins), the plan (the table's sha256: every "
            "byte of it read once more before any job starts), the environment records and the warm processes' "
            "imports beside ingestion, 17 placing jobs (a hard link each: the stamp ingestion recorded spares them "
            "a hash), the train job's start and end (the training process checksums each partition once, beside "
            "training) and "
            "the report. What the issue's scale changes is in the next note, where there is one."
        )
    scale = issue_scale()
    if scale:
        result.notes.append(scale)
    note = busy_note()
    if note:
        result.notes.append(note)
    return result


def floor_note(m: dict[str, Any], read: float) -> str:
    """Why the target is out of reach on this machine, where it is: the pass's least time from its measured parts."""
    if "ingest_cpu_s" not in m:
        return ""
    cpus = os.cpu_count() or 1
    after = sum(s for name, s in m["phases_s"].items() if name != PHASES[0][0])  # placing, training, the report
    least = m["ingest_cpu_s"] / cpus + after
    target = 1.5 * (read + m["fit_s"])
    return (
        f"Ingestion is {m['ingest_cpu_s']:.1f} s of CPU (pyarrow's read alone {m['pyarrow_read_cpu_s']:.1f} s, on "
        f"its threads), at least {m['ingest_cpu_s'] / cpus:.1f} s on {cpus} cores; with the phases after it as "
        f"measured ({after:.1f} s) the pass takes at least {least:.1f} s before snakemake's start and the plan, "
        f"against a target of {target:.1f} s."
    )


def issue_scale(path: Path = ISSUE_SCALE) -> str | None:
    """A note of the last measurement at the issue's scale (``--out``), or None where there is none."""
    if not path.is_file():
        return None
    m = read_json(path)
    read = min(m["pyarrow_read_s"], m["pyarrow_read_again_s"])
    ratio = m["workflow_s"] / (read + m["fit_s"])
    # In the order they happen (the record's keys are sorted).
    phased = "; ".join(f"{name} {m['phases_s'][name]:.1f} s" for name, _ in PHASES if name in m["phases_s"])
    limit = (
        f"a {m['limit_mb']:,} MiB cgroup (it used {m['max_usage_mb']:,.0f} MB)" if "max_usage_mb" in m else "no cgroup"
    )
    return (
        f"At the issue's scale, measured {m['measured_at']} (load average {m['load_average']:.1f} on "
        f"{m['cpus']} CPUs) with python -m bench.benchmarks.wide_table --rows {m['rows']} --limit-mb "
        f"{m['limit_mb']} --out {path.relative_to(REPO)}: {m['rows']:,} rows ({m['table_mb']:,.0f} MB of Parquet, "
        f"pyarrow's default row groups: one per file), {limit}: the pass took {m['workflow_s']:.1f} s against "
        f"pyarrow's read {read:.1f} s + trainer.fit {m['fit_s']:.1f} s, {ratio:.2f}x (target 1.5: "
        f"{'met' if ratio <= 1.5 else 'missed'}); ingestion alone {m['ingest_s']:.1f} s "
        f"({m['ingest_s'] / read:.1f}x the read), peak RSS {m['ingest_rss_mb']:,.0f} MB; phase by phase: {phased}. "
        f"{floor_note(m, read)}"
    ).rstrip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.benchmarks.wide_table", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--limit-mb", type=int, default=LIMIT_MB, help="the workflow's cgroup memory limit, MiB")
    # Outside the checkout, as `python -m bench` keeps its work: snakemake refuses to run in a subdirectory of it.
    parser.add_argument("--work", type=Path, help="where the table and the workflow go (default: a new temporary one)")
    parser.add_argument(
        "--out", type=Path, help=f"also record the measurement there (section 14 quotes {ISSUE_SCALE.name})"
    )
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix=f"snakeddp-bench-{NAME}-"))
    try:
        m = measure(work, args.rows, args.limit_mb)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(m, indent=2))
    if args.out is not None:
        at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        load = os.getloadavg()[0]
        atomic_write_json(
            args.out, {"measured_at": at, "load_average": load, "cpus": os.cpu_count(), "limit_mb": args.limit_mb, **m}
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
