"""The workflow's steps as one command line, which the rules call as shell commands.

    python -m snakeddp.steps partition --params JSON --index 3 --out part-00003.safetensors --entry part-00003.json
    python -m snakeddp.steps val       --params JSON --out val.safetensors --entry val.json
    python -m snakeddp.steps ingest    --params JSON --out results/data/<dataset>
    python -m snakeddp.steps manifest  --params JSON --dataset ID --val val.json --out manifest-4.json --entries E...
                                       (or --entries results/data/<dataset>/train: a table's P partitions)
    python -m snakeddp.steps stream    --params JSON --dataset ID --out stream-4.json
    python -m snakeddp.steps module    --params JSON --dataset ID --out module.json
    python -m snakeddp.steps run-config --run-id ID --run FILE --out run.yaml
    python -m snakeddp.steps rung-config --run-id ID --run FILE --epochs 3 --out results/search/ID/epochs-3.yaml
    python -m snakeddp.steps search-rung --rung 1 --plan FILE --records R... --out results/search/rung-1.json
    python -m snakeddp.steps environment --stage train --out results/envs/train.json [--image REF]
    python -m snakeddp.steps report --params FILE --files FILE

A run's config, a search's plan, a dataset's parameters and the report's inputs and settings come as files
(``.snakemake/snakeddp/params/<sha256>.json``, snakeddp.workflow.paramfile), which the step refuses
unless their content has the sha256 they are named by: they can outgrow a command line, and a failed job's
"shell:" line shows their path, not them. A data step's --params may be JSON too (typed by hand).

Why shell commands rather than Snakemake ``script:`` files: Snakemake reruns a script rule
whenever the script file is newer than its outputs, so a ``git pull`` or checkout that rewrites
a script would regenerate every partition and, through run.yaml and the environment records,
retrain every run. A shell rule reruns when its command text or its parameters change, which
is what actually decides these outputs. Each step is a thin adapter over the package.
"""

from __future__ import annotations

if __name__ == "__main__":  # a job of the workflow: its warm process runs it, where there is one
    from snakeddp.util.handoff import hand_off

    hand_off(__spec__.name)

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from snakeddp.errors import StepStopped, exit_code, said_when_full
from snakeddp.run import rules
from snakeddp.util import relays


def _partition(args: argparse.Namespace, *, split: str) -> None:
    from snakeddp.data.generate import write_synthetic

    write_synthetic(args.params, split, args.index, args.out, args.entry)


def _ingest(args: argparse.Namespace) -> None:
    # On the cluster the profile names where its platform spreads the read (its row's ingest: Spark's
    # executors, a Slurm array job), else here. The platform comes from the workflow's exported variables, so
    # the choice changes no rule's command, and either way gives the same partitions, byte for byte.
    from snakeddp import platforms
    from snakeddp.data import names as data_names
    from snakeddp.data.table import hand_over_written, ingest
    from snakeddp.run import variables
    from snakeddp.util.fsutil import atomic_write_json

    spread = platforms.ingester(variables.platform(os.environ))
    failed = Path(args.out) / data_names.INGEST_FAILED
    failed.unlink(missing_ok=True)
    try:
        with said_when_full(args.out, "the table's partitions in"):  # ingest removes what it began first
            if spread is None:
                summary = ingest(args.params, args.out)
            else:
                summary = spread(args.params, args.out, os.environ)
    except StepStopped:
        raise  # the runs training beside it got the stop too: they stop as preempted, not on a failed ingestion
    except Exception:
        # Runs of the workflow's invocation training beside it (data.stream) wait for partitions that will not
        # come: said to them at once. A step run by hand names no invocation, and leaves nothing.
        if os.environ.get(variables.INVOCATION):
            with contextlib.suppress(OSError):
                atomic_write_json(failed, {"invocation": os.environ[variables.INVOCATION]})
        raise
    # The files are at their final paths (the dataset's folder): training on this machine need not hash them again.
    hand_over_written(args.out)
    print(f"ingested {summary['rows_read']} rows ({summary['rows_dropped']} dropped): {summary['records']}")


def _manifest(args: argparse.Namespace) -> None:
    from snakeddp.data import names as data_names
    from snakeddp.data.generate import write_dataset_manifest

    entries = args.entries
    if len(entries) == 1 and entries[0].is_dir():  # a table's ingestion folder: its partitions' entries
        folder = entries[0]
        entries = [folder / f"{data_names.partition_file(i)}.json" for i in range(args.params["num_train_files"])]
    write_dataset_manifest(args.out, args.dataset, args.params, entries, args.val)


def _stream(args: argparse.Namespace) -> None:
    from snakeddp.data.stream import write_stream_manifest

    stream = write_stream_manifest(args.out, args.dataset, args.params)
    print(f"stream of {stream['partitions']} partitions: {stream['records']}")


def _module(args: argparse.Namespace) -> None:
    from snakeddp.data.custom import write_module_record

    write_module_record(args.out, args.dataset, args.params)


def _run_config(args: argparse.Namespace, *, epochs: int | None = None, run_dir: Path | None = None) -> None:
    from snakeddp.run.attempt import no_live_attempt
    from snakeddp.run.runfile import RunFile
    from snakeddp.workflow import paramfile

    run = paramfile.read(args.run)
    if epochs is not None:
        run["config"]["trainer"]["max_epochs"] = epochs
    # A second invocation (--nolock) must not put another config under a run that is training: its
    # provenance would then disagree with its run.yaml. The output is update() (Snakemake leaves it
    # in place), and it is written, or refused, under the run's exclusive lock.
    with no_live_attempt(run_dir or Path(args.out).parent):
        RunFile(run_id=args.run_id, config=run["config"], point=run["point"]).write(args.out)


def _rung_config(args: argparse.Namespace) -> None:
    """run.yaml at a search rung's budget: the run's config with trainer.max_epochs set to its epochs."""
    from snakeddp.run.layout import RunPaths

    # results/search/<run>/epochs-<n>.yaml: its run trains in results/runs/<run>.
    _run_config(args, epochs=args.epochs, run_dir=RunPaths.under(args.out.parents[2], args.run_id).folder)


def _search_rung(args: argparse.Namespace) -> None:
    from snakeddp.provenance.schema import validate_file
    from snakeddp.run import search
    from snakeddp.workflow import paramfile

    plan, groups = search.plan_from_json(paramfile.read(args.plan))
    records = {str(path): validate_file(path) for path in args.records}
    decision = search.rung_decision(plan, groups, args.rung, records)
    search.write_decision(args.out, decision)
    promoted = search.survivors(decision)
    print(
        f"search: rung {args.rung} ({plan.budgets[args.rung]} epochs) ranked {len(decision['configurations'])} "
        f"configurations by {plan.metric} ({plan.mode}); promoted: {', '.join(promoted) or 'none (last rung)'}"
    )


def _environment(args: argparse.Namespace) -> None:
    from snakeddp.environment.capture import capture
    from snakeddp.run import variables

    # The lock's path comes from the workflow's environment: as a parameter, moving the checkout
    # would change it and retrain every run; its content reaches the rule as a checksum parameter.
    capture(stage=args.stage, lock_path=variables.lock_path(os.environ), out_path=args.out, image=args.image or None)


def _report(args: argparse.Namespace) -> None:
    from snakeddp.util.shutdown import freeze_imports, pause_collection

    pause_collection()  # matplotlib, pandas, rocrate: imported without collections, then frozen
    from snakeddp.report import job
    from snakeddp.workflow import paramfile

    freeze_imports()  # and so less work at exit (snakeddp.util.shutdown)
    job.write({**paramfile.read(args.params), **paramfile.read(args.files)})


def _json(text: str) -> object:
    """A dataset's parameters: the file the workflow planned (snakeddp.workflow.paramfile), or JSON typed by hand
    (or handed to a remote platform's job: databricks.ingest)."""
    if not text.lstrip().startswith("{"):
        from snakeddp.workflow import paramfile

        return paramfile.read(text)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m snakeddp.steps", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    steps = parser.add_subparsers(dest="step", required=True, metavar="STEP")
    # What each step makes is said once, in the registry the rules and the crate use.
    does = {step.subcommand: step.does for step in rules.STEPS if step.subcommand}

    def step(name: str, func: Callable[[argparse.Namespace], None], out: bool = True) -> argparse.ArgumentParser:
        sub = steps.add_parser(name, help=does[name])
        sub.set_defaults(func=func)
        if out:
            sub.add_argument("--out", required=True, type=Path, help="the step's output")
        return sub

    def dataset_params(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--params", required=True, type=_json, help="dataset parameters: a file of them, or JSON")

    for name, split in (("partition", "train"), ("val", "val")):
        sub = step(name, functools.partial(_partition, split=split))
        dataset_params(sub)
        sub.add_argument("--entry", required=True, type=Path, help="where the checksum entry goes")
        # Empty: a table's files are its ingestion's (step ingest). Kept in the rules' command, their rerun key.
        sub.add_argument("--ingest", default="", help="unused (empty)")
        if split == "train":
            sub.add_argument("--index", required=True, type=int, help="partition index")
        else:
            sub.set_defaults(index=0)  # one validation file, drawn from its own stream
    dataset_params(step("ingest", _ingest))
    manifest = step("manifest", _manifest)
    dataset_params(manifest)
    manifest.add_argument("--dataset", required=True, help="dataset id")
    manifest.add_argument("--val", required=True, type=Path, help="the validation set's entry")
    manifest.add_argument(
        "--entries", nargs="*", type=Path, default=[], help="train partition entries in order, or a table's train/"
    )
    stream = step("stream", _stream)
    dataset_params(stream)
    stream.add_argument("--dataset", required=True, help="dataset id")
    module = step("module", _module)
    dataset_params(module)
    module.add_argument("--dataset", required=True, help="dataset id")
    run_config = step("run-config", _run_config)
    run_config.add_argument("--run-id", required=True, help="run id")
    run_config.add_argument("--run", required=True, help='a file of {"point": ..., "config": ...} (paramfile)')
    rung_config = step("rung-config", _rung_config)
    rung_config.add_argument("--run-id", required=True, help="run id")
    rung_config.add_argument("--run", required=True, help='a file of {"point": ..., "config": ...} (paramfile)')
    rung_config.add_argument("--epochs", required=True, type=int, help="the rung's budget (trainer.max_epochs)")
    search_rung = step("search-rung", _search_rung)
    search_rung.add_argument("--rung", required=True, type=int, help="the rung's index (0 = first)")
    search_rung.add_argument("--plan", required=True, help="a file of the search's plan and configurations (paramfile)")
    search_rung.add_argument("--records", nargs="+", type=Path, required=True, help="the rung's runs' records")
    environment = step("environment", _environment)
    environment.add_argument("--stage", required=True, help="data, train or report")
    environment.add_argument("--image", default=None, help="container image the stage runs in")
    report = step("report", _report, out=False)
    report.add_argument("--params", required=True, help="a file of its settings, config and config files (paramfile)")
    report.add_argument("--files", required=True, help="a file of its inputs and outputs by name (paramfile)")
    return parser.parse_args(argv)


#: How a step's one-line errors begin where not "snakeddp.steps:": the report's are read in its log
#: (Snakemake shows it when the job fails) as the report's.
PROGS = {"report": "snakeddp report"}


@contextlib.contextmanager
def stops_end_the_step() -> Iterator[None]:
    """A stop (SIGTERM: Snakemake's relay, a scheduler; a closed terminal's SIGHUP, unless `nohup` ignores it)
    raised where the step is as StepStopped, so it ends as one line with its files closed and its scratch removed on
    the way out; by their defaults it died at once, mid-write, and said nothing in its log. Ctrl-C stays Python's
    (exit_code ends it quietly). Only the main thread may set handlers: elsewhere (a caller's thread) nothing
    changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        for stop_signal in stops:
            signal.signal(stop_signal, signal.SIG_IGN)  # one stop: the relay or the hang-up that follows is the same
        raise StepStopped(
            f"stopped by {signal.Signals(signum).name} before it finished; Snakemake removes what it wrote. "
            "HINT: rerun the same command to make it again (finished jobs do not run again)."
        )

    stops = relays.with_hangup((signal.SIGTERM,))
    with relays.handled(stops, stop):
        yield


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with stops_end_the_step():
        args.func(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(exit_code(PROGS.get(next(iter(sys.argv[1:]), ""), "snakeddp.steps"), main))
