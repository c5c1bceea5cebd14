"""The workflow's steps as one command line, which the rules call as shell commands.

    python -m snakeddp.steps partition --params JSON --index 3 --out part-00003.safetensors --entry part-00003.json
    python -m snakeddp.steps val       --params JSON --out val.safetensors --entry val.json
    python -m snakeddp.steps ingest    --params JSON --out results/data/<dataset>/ingest
    python -m snakeddp.steps manifest  --params JSON --dataset ID --val val.json --out manifest-4.json --entries E...
    python -m snakeddp.steps module    --params JSON --dataset ID --out module.json
    python -m snakeddp.steps run-config --run-id ID --run JSON --out run.yaml
    python -m snakeddp.steps environment --stage train --out results/envs/train.json [--image REF]

Why shell commands rather than Snakemake ``script:`` files: Snakemake reruns a script rule
whenever the script file is newer than its outputs, so a ``git pull`` or checkout that rewrites
a script would regenerate every partition and, through run.yaml and the environment records,
retrain every run. A shell rule reruns when its command text or its parameters change, which
is what actually decides these outputs. Each step is a thin adapter over the package.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

LOCK_VARIABLE = "SNAKEDDP_LOCK"


def _partition(args: argparse.Namespace, split: str) -> None:
    if args.params.get("source") == "table":
        from snakeddp.data.table import place

        place(args.ingest, split, args.index, args.out, args.entry)
    else:
        from snakeddp.data.generate import write_synthetic

        write_synthetic(args.params, split, args.index, args.out, args.entry)


def _ingest(args: argparse.Namespace) -> None:
    from snakeddp.data.table import ingest

    summary = ingest(params=args.params, out_dir=args.out)
    print(f"ingested {summary['rows_read']} rows ({summary['rows_dropped']} dropped): {summary['records']}")


def _manifest(args: argparse.Namespace) -> None:
    from snakeddp.data.generate import write_dataset_manifest

    write_dataset_manifest(args.out, args.dataset, args.params, args.entries, args.val)


def _module(args: argparse.Namespace) -> None:
    from snakeddp.data.custom import write_module_record

    write_module_record(args.out, args.dataset, args.params)


def _run_config(args: argparse.Namespace) -> None:
    from snakeddp.run.runfile import RunFile

    RunFile(run_id=args.run_id, config=args.run["config"], point=args.run["point"]).write(args.out)


def _environment(args: argparse.Namespace) -> None:
    from snakeddp.environment.capture import capture

    # The lock's path comes from the workflow's environment: as a parameter, moving the checkout
    # would change it and retrain every run; its content reaches the rule as a checksum parameter.
    capture(stage=args.stage, lock_path=os.environ[LOCK_VARIABLE], out_path=args.out, image=args.image or None)


STEPS: dict[str, Callable[[argparse.Namespace], None]] = {
    "partition": lambda args: _partition(args, "train"),
    "val": lambda args: _partition(args, "val"),
    "ingest": _ingest,
    "manifest": _manifest,
    "module": _module,
    "run-config": _run_config,
    "environment": _environment,
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.steps", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("step", choices=sorted(STEPS))
    parser.add_argument("--out", required=True, type=Path, help="the step's output")
    parser.add_argument("--params", type=json.loads, default={}, help="dataset parameters as JSON")
    parser.add_argument("--index", type=int, default=0, help="partition index")
    parser.add_argument("--entry", type=Path, help="where a partition's checksum entry goes")
    parser.add_argument("--ingest", help="a table dataset's ingestion directory (empty for synthetic data)")
    parser.add_argument("--dataset", help="dataset id")
    parser.add_argument("--val", type=Path, help="the validation set's entry (manifest)")
    parser.add_argument("--run-id", help="run id (run-config)")
    parser.add_argument("--run", type=json.loads, help='{"point": ..., "config": ...} as JSON (run-config)')
    parser.add_argument("--stage", help="data, train or report (environment)")
    parser.add_argument("--image", default=None, help="container image the stage runs in (environment)")
    parser.add_argument(
        "--entries", nargs="*", type=Path, default=[], help="train partition entries, in order (manifest)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    STEPS[args.step](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
