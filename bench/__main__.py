"""python -m bench [NAME ...]: run the benchmarks, write bench/results.md and bench/results.json.

python -m bench                          # every benchmark at the default sizes (minutes on 2 cores)
python -m bench partition_read memory    # some of them; the others' results are kept
python -m bench --partitions 1000        # the tutorial's 1,000 partitions x 10,000 x 1,000 (hours, 40 GB)
python -m bench --tiny --results /tmp/b  # smoke test of the harness (what CI runs)
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

from bench import report
from bench.benchmarks import BENCHMARKS, ON_GPU, REGISTERED
from bench.harness import REPO, TINY, Context, Sizes, machine
from snakeddp.util.shutdown import freeze_at_exit


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = Sizes()
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default all but {', '.join(ON_GPU)}, which need a GPU): {', '.join(REGISTERED)}",
    )
    parser.add_argument("--records", type=int, help=f"samples per partition (default {defaults.records:,})")
    parser.add_argument("--features", type=int, help=f"features per sample (default {defaults.features:,})")
    parser.add_argument("--val-records", type=int, help=f"validation samples (default {defaults.val_records:,})")
    parser.add_argument("--partitions", type=int, help="train partitions (default: each benchmark's own, 2-8)")
    parser.add_argument("--reps", type=int, help="kept repetitions per case (default: each benchmark's own)")
    parser.add_argument("--warmup", type=int, help="discarded rounds before them (default: each benchmark's own, 0-2)")
    parser.add_argument(
        "--workflow-partitions",
        type=int,
        help=f"partitions of the dry-run / no-op config (default {defaults.workflow_partitions:,})",
    )
    parser.add_argument("--sweep-runs", type=int, help=f"runs of that config's sweep (default {defaults.sweep_runs})")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes, one repetition: checks the harness only")
    parser.add_argument(
        "--results", type=Path, default=REPO / "bench", help="where results.md and results.json go (default bench/)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch data (a temporary directory; its path is printed)"
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in REGISTERED]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(REGISTERED)}")
    return args


def sizes_from(args: argparse.Namespace) -> Sizes:
    sizes = TINY if args.tiny else Sizes()
    overrides = {
        "records": args.records,
        "features": args.features,
        "val_records": args.val_records,
        "partitions": args.partitions,
        "reps": args.reps,
        "warmup": args.warmup,
        "workflow_partitions": args.workflow_partitions,
        "sweep_runs": args.sweep_runs,
    }
    return replace(sizes, **{k: v for k, v in overrides.items() if v is not None})


def run_one(name: str, sizes: Sizes, out: Path, work: Path, keep: bool) -> dict:
    module = importlib.import_module(f"bench.benchmarks.{name}")
    scratch = work / name
    started, clock = datetime.now(UTC).isoformat(timespec="seconds"), time.perf_counter()
    print(f"bench: {module.TITLE} ...", flush=True)
    measured_on = machine()
    try:
        result = module.run(Context(sizes=sizes, work=scratch, out=out))
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    result.started_at, result.seconds, result.machine = started, time.perf_counter() - clock, measured_on
    result.sizes = result.sizes or {k: v for k, v in asdict(sizes).items() if k in ("records", "features")}
    for figure in result.figures:
        met = "" if figure.met is None else ("  met" if figure.met else "  MISSED")
        ratio = "" if figure.ratio is None else f"  ratio {figure.ratio:.3g} ({figure.ratio_of})"
        print(f"  {figure.label}: ours {figure.ours:.4g} {figure.unit}{ratio}{met}", flush=True)
    print(f"  ({result.seconds:.0f} s)", flush=True)
    return result.as_dict()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sizes_from(args)
    names = args.names or list(BENCHMARKS)
    try:  # before any benchmark runs: results.md is written with the notes after each one
        report.hand_notes(args.results / report.NOTES)
    except ValueError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    out = args.results / "out"
    out.mkdir(parents=True, exist_ok=True)
    # Outside the checkout (results/ defaults to bench/ in it): snakemake refuses to run in a
    # subdirectory of the checkout, and the workflow benchmarks run it in their scratch space.
    work = Path(tempfile.mkdtemp(prefix="snakeddp-bench-"))
    failed = []
    for name in names:
        try:
            result = run_one(name, sizes, out, work, args.keep)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        data = report.merge(args.results / "results.json", [result], list(REGISTERED))
        report.write_markdown(args.results / "results.md", data)
    if args.keep:
        print(f"bench: kept the scratch data in {work}", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"bench: wrote {args.results / 'results.md'} and {args.results / 'results.json'}", flush=True)
    if failed:
        print(f"bench: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Everything is written before the exit, whose last collection walked every object the in-process benchmarks
    # imported (torch and Lightning: about 1 s of CPU a run here); frozen, it has nothing to walk.
    freeze_at_exit()
    raise SystemExit(main())
