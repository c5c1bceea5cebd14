"""The ``snakeddp`` command: look at runs from the terminal."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from snakeddp.report.table import runs_frame


def cmd_runs(args: argparse.Namespace) -> int:
    files = sorted(Path(args.results).glob("runs/*/provenance.json"))
    if not files:
        print(f"no finished runs under {args.results}/runs")
        return 1
    print(runs_frame(files).to_string(index=False))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="snakeddp", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    runs = sub.add_parser("runs", help="table of finished runs")
    runs.add_argument("--results", default="results", help="the workflow's results directory")
    runs.set_defaults(func=cmd_runs)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
