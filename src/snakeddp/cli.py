"""The ``snakeddp`` command: look at, compare and verify finished runs from the terminal.

    snakeddp runs                      table of finished runs under results/
    snakeddp compare RUN_A RUN_B       what differs: config, code, data, environment, layout, outcome
    snakeddp verify [RUN]              recompute checkpoint and data checksums against provenance
                                       (every finished run when RUN is left out)

RUN is a run id (results/runs/<id>), a run directory or its provenance.json. The results
directory is the checkout's results/, found from any directory inside it (--results to choose).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import pandas as pd

from snakeddp import __version__
from snakeddp.errors import ConfigError, RunNotFound
from snakeddp.provenance.compare import compare, format_comparison
from snakeddp.provenance.verify import format_checks, verify_run
from snakeddp.report.runs import default_results, find_runs, resolve_run
from snakeddp.report.table import readable, summary_frame


def cmd_runs(args: argparse.Namespace) -> int:
    runs = find_runs(args.results)
    if not runs:
        print(f"no finished runs under {args.results}/runs (a run is finished when it has provenance.json)")
        return 1
    frame = summary_frame(runs)
    if args.json:
        print(json.dumps(frame.to_dict(orient="records"), indent=2, default=str))
        return 0
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(frame.astype(object).map(readable).to_string(index=False))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    result = compare(resolve_run(args.run_a, args.results), resolve_run(args.run_b, args.results))
    print(json.dumps(result, indent=2, default=str) if args.json else format_comparison(result))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    runs = [resolve_run(args.run, args.results)] if args.run else find_runs(args.results)
    if not runs:
        raise RunNotFound(
            f"no finished runs under {args.results}/runs. HINT: run snakemake first, or pass --results DIR."
        )
    ok = True
    for run in runs:
        checks = verify_run(run)
        print(format_checks(run, checks))
        ok = ok and all(check.ok for check in checks)
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="snakeddp", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"snakeddp {__version__}")
    parser.add_argument(
        "--results", default=None, help="the workflow's results directory (default: the checkout's results/)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    runs = sub.add_parser("runs", help="table of finished runs")
    runs.add_argument("--json", action="store_true", help="print the rows as JSON")
    runs.set_defaults(func=cmd_runs)
    diff = sub.add_parser("compare", help="what differs between two runs")
    diff.add_argument("run_a", metavar="RUN_A")
    diff.add_argument("run_b", metavar="RUN_B")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    diff.set_defaults(func=cmd_compare)
    verify = sub.add_parser("verify", help="recompute a run's checkpoint and data checksums against its provenance")
    verify.add_argument("run", metavar="RUN", nargs="?", help="one run (default: every finished run)")
    verify.set_defaults(func=cmd_verify)
    for sp in (runs, diff, verify):
        sp.add_argument("--results", default=argparse.SUPPRESS, help="the workflow's results directory")
    args = parser.parse_args(argv)
    args.results = args.results or default_results()
    try:
        return args.func(args)
    except ConfigError as exc:  # the family: a run not found, a damaged record, ...
        print(f"snakeddp {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
