"""snakeddp: look at, compare, verify and prune finished runs from the terminal.

    snakeddp runs [--all] [--configfile FILE] [--config KEY=VALUE]
                                       the finished runs under results/: current (the config's, as the
                                       report lists them), then history (--all: and earlier attempts)
    snakeddp compare RUN_A RUN_B       what differs: config, code, data, environment, layout, outcome
    snakeddp verify [RUN]              recompute checkpoint and data checksums against provenance
                                       (every run `runs` lists when RUN is left out)
    snakeddp prune [--best N] [--last N] [--dry-run] [RUN ...]
                                       remove checkpoints of earlier attempts (keeps their records)
    snakeddp prune --data [--dry-run] [--configfile FILE] [--config KEY=VALUE]
                                       remove the datasets under results/data/ that the config does not
                                       plan and no run, nor any attempt with its checkpoints, trained on
    snakeddp export RUN [--to DIR]     the best checkpoint as model.safetensors + model.json, which
                                       snakeddp.load(DIR) rebuilds without unpickling anything
                                       (default DIR: results/export/RUN)
    snakeddp status [--json] [--configfile FILE] [--config KEY=VALUE]
                                       every run of the checkout now: queued, starting, training, hung,
                                       done, not started (its status.json, and what Slurm answers),
                                       and the attempt that finished before a latest one that failed
    snakeddp warm                      keep a warm process for many local invocations: prints
                                       `export SNAKEDDP_WARM_SOCKET=...`; each invocation with it
                                       forks its jobs from it (Ctrl-C stops it)
    snakeddp nodes [--clear NODE]      the ledger of nodes (results/nodes.json): each node's hangs, slow
                                       spells and failures, and whether Slurm leaves it out; --clear
                                       forgets a node's events

RUN is a run id (results/runs/<id>), a run directory or its provenance.json; RUN@ID is an earlier
attempt of that run (ID: its attempt id or a unique prefix, as `runs --all` shows). The results
directory is the checkout's results/, found from any directory inside it (--results to choose).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from snakeddp import __version__, platforms
from snakeddp.errors import ConfigError, ExportError, ProvenanceError, RunNotFound
from snakeddp.provenance.verify import format_checks, verdict, verify_run
from snakeddp.report.compare import compare, format_comparison
from snakeddp.report.table import Rows, aligned, steady_throughput, summary_rows
from snakeddp.run import current, ledger, prunedata, rungs, status
from snakeddp.run.attempt import attempt_id
from snakeddp.run.layout import ATTEMPTS, RunPaths, latest_train_log
from snakeddp.run.prune import prune
from snakeddp.run.runs import (
    Run,
    Unfinished,
    best_checkpoint,
    default_results,
    earlier_attempts,
    find_runs,
    find_unfinished,
    last_finished,
    resolve_run,
    unfinished_attempts,
)
from snakeddp.util.fsutil import read_json, tree_size
from snakeddp.util.numbers import disk_size, readable
from snakeddp.util.paths import inside

# What `runs --all` lists last.
UNFINISHED = (
    f"earlier attempts kept under {ATTEMPTS}/ that never finished (an attempt of their config resumes from their "
    "checkpoints; `snakeddp prune` removes those as it does finished attempts')"
)
# What the runs table's second part holds.
HISTORY = (
    "finished runs the config does not plan (earlier sweeps, other experiments) or trained with another config, "
    "and, with --all, earlier attempts"
)


def current_and_history(args: argparse.Namespace, finished: list) -> tuple[list, list, list[str]]:
    """The finished runs the config of these flags plans and that trained its runs (as the report lists them), the
    others, and the planned run ids; every run is current when no config is known."""
    planned = current.planned_from_command_line(Path(args.results).parent, args.configfile, args.config)
    if planned is None:
        if finished:
            print(
                f"snakeddp runs: no {current.CONFIG_FILE} beside {args.results}: listing every finished run; "
                "give the --configfile and --config you gave snakemake to tell current runs from history",
                file=sys.stderr,
            )
        return finished, [], []
    return *current.split(finished, planned), planned.ids


def listed(results: Path, command: str) -> list[Run]:
    """The finished runs under ``results``, each record snakeddp did not write named in a line of its own and
    left out (the report refuses it; a listing shows the others)."""
    passed_over: list[ProvenanceError] = []
    runs = find_runs(results, passed_over)
    for error in passed_over:
        print(f"snakeddp {command}: left out {error}", file=sys.stderr)
    return runs


def later_attempt(run: Run) -> dict[str, Any]:
    """The attempt that now holds the run directory of ``run`` (a finished attempt kept under attempts/, shown for
    its run by ``last_finished``) and has not finished: its id (run-state.json) and state (status.json)."""
    paths = RunPaths(run.paths.run_dir)
    try:
        key = read_json(paths.state).get("resume_key")
    except (OSError, ValueError, AttributeError):
        key = None
    said = status.read(paths.run_dir) or {}
    return {"id": attempt_id(key) if isinstance(key, str) else None, "state": said.get("state")}


def latest_attempt_said(run: Run, later: dict[str, Any], results: Path) -> str:
    """``its latest attempt <id> failed (its log: …)``: what became of the attempt after ``run`` (``later_attempt``)."""
    # "done" is the status the attempt moved aside left: the later one has not started.
    how = {"failed": "failed", "hung": "hung", "stopped": "was stopped", "done": "has not trained yet"}.get(
        later["state"]
    )
    how = how or (f"has not finished ({later['state']})" if later["state"] else "has not finished")
    # Its log, or where any later invocation moved it aside (the note named none once one had); not one older than
    # the attempt that finished before it.
    finished = datetime.fromisoformat(run.provenance["timing"]["finished_at"]).timestamp()
    log = latest_train_log(results.parent, run.run_id, since=finished)
    where = f" (its log: {log})" if log is not None else ""
    return f"its latest attempt {later['id'] or '(unknown)'} {how}{where}"


def finished_attempt_said(run: Run, score: bool = False) -> str:
    """``3 epochs, best checkpoint <id>/checkpoints/…, kept under attempts/`` of a finished attempt kept under
    attempts/ (with ``score``, its best score after its epochs)."""
    best = (run.provenance.get("training") or {}).get("best_checkpoint") or {}
    shown = score and run.best_score is not None
    scored = f", best {run.monitor['metric']} {readable(run.best_score)}" if shown else ""
    kept = f", best checkpoint {run.paths.folder.name}/{best['path']}" if best.get("path") else ""
    return f"{run.provenance['training']['epochs_completed']} epochs{scored}{kept}, kept under {ATTEMPTS}/"


def later_attempt_note(run: Run, later: dict[str, Any], results: Path) -> str:
    """One line under the table: which finished attempt stands for its run, and what became of the later one."""
    return (
        f"{run.run_id}: {latest_attempt_said(run, later, results)}; shown is {run.label}, the last attempt that "
        f"finished ({finished_attempt_said(run)})"
    )


def standing_runs(results: Path, command: str) -> list[Run]:
    """``last_finished``: per run whose latest attempt has not finished, the attempt that last did, each record
    snakeddp did not write named in a line of its own and left out (as ``listed``)."""
    passed_over: list[ProvenanceError] = []
    standing = last_finished(results, passed_over)
    for error in passed_over:
        print(f"snakeddp {command}: left out {error}", file=sys.stderr)
    return standing


def cmd_runs(args: argparse.Namespace) -> int:
    finished = listed(args.results, "runs")
    # A run whose later attempt failed (or was stopped, or trains) still shows what it last trained.
    standing = standing_runs(args.results, "runs")
    now, history, planned = current_and_history(args, finished + standing)
    if args.all:
        shown = {run.run_dir for run in standing}
        history += [
            attempt
            for run in finished + standing
            for attempt in earlier_attempts(run.paths.run_dir)
            if attempt.run_dir not in shown
        ]
    unfinished = find_unfinished(args.results) if args.all else []
    if not now and not history and not unfinished:
        print(
            f"no finished runs under {args.results}/runs (a run is finished when it has provenance.json). HINT: run "
            "snakemake first (`snakeddp status` shows runs on their way), or pass --results DIR."
        )
        return 1
    later = {run.run_dir: later_attempt(run) for run in standing}
    if args.json:
        rows = [
            {**row, "current": is_current, **({"later_attempt": later[run.run_dir]} if run.run_dir in later else {})}
            for runs, is_current in ((now, True), (history, False))
            if runs
            for run, row in zip(runs, summary_rows(runs, raw=True).records(), strict=True)
        ]
        rows += [{**unfinished_row(attempt, raw=True), "current": False, "unfinished": True} for attempt in unfinished]
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if now:
        print(aligned(summary_rows(now), readable))
        for run in now:
            if run.run_dir in later:
                print(later_attempt_note(run, later[run.run_dir], Path(args.results)))
    waiting = [rid for rid in planned if rid not in {run.run_id for run in now}]
    halted = rungs.stopped(args.results)
    if stopped_here := [rid for rid in waiting if rid in halted]:
        shown = (f"{rid} (rung {halted[rid]['rung']}, {halted[rid]['epochs']} epochs, rank {halted[rid]['rank']})"
                 for rid in stopped_here)  # fmt: skip
        print(f"stopped by the search: {', '.join(shown)}")
    # Its directory holds an attempt of another config (an edit snakemake has not trained yet): listed in history.
    retrains = {run.run_id for run in history if run.run_id in planned}
    if other := [rid for rid in waiting if rid in retrains and rid not in halted]:
        print(f"trained with another config (under history), which snakemake trains again: {', '.join(other)}")
    if waiting := [rid for rid in waiting if rid not in halted and rid not in retrains]:
        # Plain, it answers for the checkout's config: a user who trained with --configfile read it as theirs.
        whose = (
            ""
            if args.configfile or args.config
            else f" (the runs {current.CONFIG_FILE} plans; give the --configfile you gave snakemake for yours)"
        )
        print(f"not finished yet: {', '.join(waiting)}{whose}")
    if history:
        print(f"\nhistory: {HISTORY}")
        print(aligned(summary_rows(history), readable))
        for run in history:
            if run.run_dir in later:
                print(later_attempt_note(run, later[run.run_dir], Path(args.results)))
    if unfinished:
        print(f"\nunfinished: {UNFINISHED}")
        rows = [unfinished_row(attempt) for attempt in unfinished]
        print(aligned(Rows(list(rows[0]), [list(row.values()) for row in rows]), readable))
    return 0


def unfinished_row(attempt: Unfinished, raw: bool = False) -> dict[str, Any]:
    """An unfinished kept attempt as `runs --all` lists it: its epochs, when the last ended and its checkpoints' size
    (``raw``: bytes, None where pruned or none)."""
    folder = attempt.paths.checkpoints
    size = tree_size(folder) if folder.is_dir() else None
    shown = "pruned" if attempt.pruned is not None else "none" if size is None else disk_size(size)
    return {
        "run": attempt.label,
        "epochs": len(attempt.metrics),
        "last epoch ended": attempt.ended_at or None,
        "checkpoints": size if raw else shown,
    }


def cmd_compare(args: argparse.Namespace) -> int:
    runs = [resolve_run(ref, args.results, stopped=True) for ref in (args.run_a, args.run_b)]
    for run in runs:
        if run.is_current and not run.paths.provenance.is_file():  # a run a search stopped: its rung's record
            epochs = run.provenance["training"]["max_epochs"]
            print(f"snakeddp compare: {run.label} was stopped by the search: compared as it was at {epochs} epochs, "
                  f"its record at that rung", file=sys.stderr)  # fmt: skip
    result = compare(*runs, raw=args.json)
    print(json.dumps(result, indent=2, default=str) if args.json else format_comparison(result))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    runs = [resolve_run(args.run, args.results)] if args.run else every_listed_run(args.results)
    if not runs:
        raise RunNotFound(
            f"no finished runs under {args.results}/runs. HINT: run snakemake first, or pass --results DIR."
        )
    results = []
    for run in runs:
        checks = verify_run(run)
        print(format_checks(run, checks, hint=len(runs) == 1), flush=True)
        results.append((run, checks))
    if len(runs) > 1:
        print(verdict(results))  # the HINT once, for every run that failed
    return 0 if all(check.ok for _, checks in results for check in checks) else 1


def every_listed_run(results: Path) -> list[Run]:
    """The runs `snakeddp runs` lists, by run id: each finished run and, for a run whose latest attempt has not
    finished, the attempt that last did (its only model, which `verify` of every run left unchecked)."""
    return sorted(find_runs(results) + last_finished(results), key=lambda run: run.run_id)


def count(text: str) -> int:
    """A number of attempts to keep: 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a count. HINT: give 0 or a positive whole number.")
    return int(text)


def cmd_prune(args: argparse.Namespace) -> int:
    if args.data:
        return prune_data(args)
    if args.configfile or args.config:
        raise prunedata.DataPruneError(
            "--configfile and --config tell `snakeddp prune --data` which datasets the config plans; checkpoints of "
            "earlier attempts are pruned whatever the config. HINT: leave them out, or add --data to prune datasets."
        )
    if attempts := [ref for ref in args.runs if "@" in ref]:
        # A RUN@ID named no run directory with earlier attempts: prune said it removed nothing, as if asked to.
        raise ConfigError(
            f"{attempts[0]}: prune takes runs, not attempts: --best and --last choose which of a run's earlier "
            f"attempts keep their checkpoints. HINT: name the run: `snakeddp prune --dry-run --best N --last N "
            f"{attempts[0].partition('@')[0]}` lists which of its attempts would go."
        )
    args.best, args.last = (1 if n is None else n for n in (args.best, args.last))
    removed = prune(prunable(args), args.best, args.last, args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for item in removed:
        aside = f"; unfinished: set aside as {item.attempt.label}-pruned, which no attempt resumes"
        aside = aside if isinstance(item.attempt, Unfinished) else ""
        print(f"{item.attempt.label}: {verb} {item.path} ({disk_size(item.size)}{aside})")
    total = disk_size(sum(item.size for item in removed))
    print(f"{verb} the checkpoints of {len(removed)} earlier attempt(s), {total}; records and metrics stay")
    return 0


def prunable(args: argparse.Namespace) -> list[Path]:
    """The run directories whose earlier attempts `snakeddp prune` considers: those of the RUNs named, else of every
    run `snakeddp runs` lists, a run whose latest attempt has not finished too (run.prune keeps the attempt that
    stands for it)."""
    if not args.runs:
        runs = listed(args.results, "prune") + standing_runs(args.results, "prune")
        dirs = {run.paths.run_dir for run in [*runs, *find_unfinished(args.results)]}
        return sorted(dirs, key=lambda run_dir: run_dir.name)
    standing = {run.run_id: run.paths.run_dir for run in last_finished(args.results, [])}
    return [standing.get(ref) or unfinished_only(args.results, ref) or resolve_run(ref, args.results).run_dir
            for ref in args.runs]  # fmt: skip


def unfinished_only(results: Path, ref: str) -> Path | None:
    """The directory of run ``ref`` where it holds no finished attempt, only unfinished ones under attempts/."""
    run_dir = RunPaths.under(results, ref)
    has_finished = run_dir.provenance.is_file() or run_dir.kept_records()
    return run_dir.folder if not has_finished and unfinished_attempts(run_dir.folder) else None


def prune_data(args: argparse.Namespace) -> int:
    """`snakeddp prune --data`: the dataset folders that the config does not plan and nothing needs (run.prunedata)."""
    if args.runs or args.best is not None or args.last is not None:
        raise prunedata.DataPruneError(
            "--data removes datasets, not checkpoints: it takes no RUN, --best or --last. HINT: prune checkpoints "
            "first (snakeddp prune --best N --last N), then the datasets only pruned attempts needed (snakeddp prune "
            "--data)."
        )
    results = Path(args.results)
    from snakeddp.compat.snakemake import workflow_locks  # checks Snakemake's version: not every command's cost

    if (locks := workflow_locks(results.parent)) and not args.dry_run:
        raise prunedata.DataPruneError(
            f"--data: a workflow holds {locks[0].parent} ({len(locks)} lock files): it runs, or was killed and not "
            "unlocked, and a dataset it is making for another config would look unneeded. HINT: let it end and run "
            "the same command again; if none runs, `snakemake --unlock` in that directory first."
        )
    planned = current.planned_datasets(results.parent, args.configfile, args.config)
    if planned is None:
        raise prunedata.DataPruneError(
            f"--data: no {current.CONFIG_FILE} beside {results} and no --configfile: which datasets the config plans "
            "is not known, so none is removed. HINT: give the --configfile and --config you gave snakemake "
            "(snakeddp prune --data --configfile FILE)."
        )
    flags = (["--configfile", *args.configfile] if args.configfile else []) + (
        ["--config", *args.config] if args.config else []
    )
    command = shlex.join(["snakeddp", "prune", "--data", *flags])
    removed, kept = prunedata.prune(results, planned, args.dry_run, command)
    verb = "would remove" if args.dry_run else "removed"
    for dataset in removed:
        print(f"{dataset.name}: {verb} {dataset.path} ({disk_size(dataset.size)})")
    total = f"{disk_size(sum(dataset.size for dataset in removed))} in {len(removed)} dataset(s)"
    said = f"would free {total}" if args.dry_run else f"freed {total}"
    if removed and not args.dry_run:
        said += f" (recorded in {prunedata.record_path(results)})"
    why = "planned by the config, or trained on by a run or an attempt whose checkpoints stay"
    print(f"{said}; kept {len(kept)}: {why}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    run = resolve_run(args.run, args.results)
    checked = best_checkpoint(run)  # refused before torch and Lightning are imported
    from snakeddp.training.export import default_destination, export  # torch: only for this command

    destination = args.to or default_destination(args.results, run)
    try:
        written = export(run, export_directory(destination), checked)
    except OSError as error:  # a directory it may not write: one line, not a traceback
        raise ExportError(
            f"run {run.label}: cannot write its export to {destination} ({error.strerror or error}). HINT: give "
            "--to a directory you can write (it is made if missing)."
        ) from error
    best = written["monitor"]
    print(f"{run.label}: exported the best checkpoint ({best['metric']} {readable(best['best'])}) to {destination}")
    return 0


def export_directory(destination: Path) -> Path:
    """``--to DIR`` where no file stands in its way (mkdir's FileExistsError was a traceback)."""
    for path in (destination, *destination.parents):
        if path.exists() and not path.is_dir():
            raise ExportError(
                f"--to {destination}: {path} is a file, and an export is a directory (model.safetensors, model.json). "
                "HINT: give --to a new or existing directory, or leave --to out (results/export/RUN)."
            )
    return destination


def cmd_nodes(args: argparse.Namespace) -> int:
    if args.clear:
        gone = ledger.clear(args.results, args.clear)
        forgot = ", ".join(map(ledger.summary, gone))
        print(f"{args.clear}: forgot {len(gone)} event(s) ({forgot}); jobs may be placed there again")
        return 0
    header, rows = ledger.rows(args.results, args.events, args.days)
    if not rows:
        print(f"no events of any node in {ledger.path(args.results)} (a hang, slow spell or failure puts one there)")
        return 0
    print(aligned(Rows(header, rows), str))
    return 0


def platform_answers(checkout: Path) -> list[dict]:
    """What each platform that can tell answers about the checkout's runs' jobs (its package's
    ``status.queued``), and a line on stderr for one that did not answer."""
    answers = []
    for row in platforms.rows():
        name = f"{row.module.rsplit('.', 1)[0]}.status"
        queued = getattr(importlib.import_module(name), "queued", None) if importlib.util.find_spec(name) else None
        if queued is None:  # a platform whose jobs' states the runs' own status.json says (snakeddp.remote.status)
            continue
        found, problem = queued(checkout)
        if problem:
            print(f"snakeddp status: {row.name}: its queued runs are not shown: {problem}", file=sys.stderr)
        answers += found
    return answers


def cmd_status(args: argparse.Namespace) -> int:
    checkout = Path(args.results).resolve().parent
    planned = current.from_command_line(checkout, args.configfile, args.config) or []
    # A run whose latest attempt has not finished: the attempt that last did, as `snakeddp runs` lists it.
    standing = standing_runs(Path(args.results), "status")
    earlier = {run.run_id: finished_earlier(run) for run in standing}
    # A done run's samples/s as `runs` and the report say it (the median over its epochs after the first).
    pace = {run.run_id: steady_pace(run) for run in find_runs(args.results, [])}
    rows = status.of_checkout(
        Path(args.results), platform_answers(checkout), planned, raw=args.json, earlier=earlier, finished_pace=pace
    )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if rows:
        print(status.table(rows))
    else:
        print(f"no runs under {args.results}/runs yet, and none queued")
    for run in standing:
        print(
            f"{run.run_id}: {latest_attempt_said(run, later_attempt(run), Path(args.results))}; {run.label} finished "
            f"before it ({finished_attempt_said(run, score=True)})"
        )
    return 0


def steady_pace(run: Run) -> float | None:
    """The run's samples/s as the runs table has it (report.table.steady_throughput's median)."""
    measured = steady_throughput(run)
    return measured[0] if measured else None


def finished_earlier(run: Run) -> dict[str, Any]:
    """What `snakeddp status --json` says of the attempt that stands for a run whose latest attempt has not finished
    (``last_finished``): its name as `snakeddp runs` lists it, its id, epochs, best score and best checkpoint."""
    best = (run.provenance.get("training") or {}).get("best_checkpoint") or {}
    path = inside(run.run_dir, best.get("path"))
    return {
        "run": run.label,
        "attempt": run.attempt_id,
        "epochs": run.provenance["training"]["epochs_completed"],
        "monitor": run.monitor["metric"],
        "best_score": run.best_score,
        "best_checkpoint": None if path is None else str(path),
    }


def cmd_warm(args: argparse.Namespace) -> int:
    from snakeddp.warm.kept import keep

    return keep()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # `snakeddp runs | head`: the reader had what it wanted and left. What is still buffered
        # goes nowhere, not into a second BrokenPipeError at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    args.results = args.results or default_results()
    try:
        return args.func(args)
    except ConfigError as exc:  # the family: a run not found, a damaged record, ...
        print(f"snakeddp {args.command}: {exc}", file=sys.stderr)
        return 2


class _OneLineParser(argparse.ArgumentParser):
    """argparse's parser whose refusal of what was typed is one line with a HINT (argparse prints its usage, then
    ``PROG: error: ...``): a wrong option or value names the (sub)command it was given to and its --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}. HINT: {self.prog} --help says what it takes.\n")

    #: The subcommands' parsers by name (add_subparsers' choices), where this is the command's.
    subcommands: Mapping[str, argparse.ArgumentParser] = {}

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:  # the subcommand's words it does not know: refused by the subcommand, whose --help lists its own
            command = self.subcommands.get(getattr(parsed, "command", None) or "", self)
            command.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def _parser() -> argparse.ArgumentParser:
    """The `snakeddp` command and its subcommands, each added by a function of its own below."""
    parser = _OneLineParser(prog="snakeddp", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"snakeddp {__version__}")
    parser.add_argument(
        "--results", default=None, help="the workflow's results directory (default: the checkout's results/)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    parser.subcommands = sub.choices
    reading = [
        add(sub) for add in (_add_runs, _add_compare, _add_verify, _add_prune, _add_export, _add_nodes, _add_status)
    ]
    _add_warm(sub)
    for sp in reading:
        sp.add_argument("--results", default=argparse.SUPPRESS, help="the workflow's results directory")
    return parser


Subparsers = Any  # argparse's _SubParsersAction, a private name


def add_config_flags(parser: argparse.ArgumentParser, when: str, meaning: str) -> None:
    """--configfile and --config as snakemake was given them, to know the config's plan: ``when`` they count, and
    what the config's ``meaning`` is for the command."""
    parser.add_argument(
        "--configfile",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help=f"{when}the config file(s) given to snakemake: {meaning}",
    )
    parser.add_argument(
        "--config",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help=f"{when}the --config given to snakemake, as typed there",
    )


def _add_runs(sub: Subparsers) -> argparse.ArgumentParser:
    runs = sub.add_parser(
        "runs",
        help="table of finished runs",
        description="A table of the finished runs under results/: config that differs, val_loss, epochs, "
        "throughput, launcher. First the current runs (those the config plans: config/config.yaml with the "
        "--configfile and --config you gave snakemake, as the report lists them), then, as history, finished "
        "runs of other configs; --all adds each run's earlier finished attempts there as RUN@ID. A run whose latest "
        "attempt has not finished (failed, stopped, training) is listed as its last finished attempt, RUN@ID, with a "
        "line naming the later one.",
    )
    runs.add_argument("--json", action="store_true", help="print the rows as JSON")
    runs.add_argument("--all", action="store_true", help="also list each run's earlier finished attempts (RUN@ID)")
    add_config_flags(runs, "", "its runs are current, the others history")
    runs.set_defaults(func=cmd_runs)
    return runs


def _add_compare(sub: Subparsers) -> argparse.ArgumentParser:
    diff = sub.add_parser(
        "compare",
        help="what differs between two runs",
        description="What differs between two runs (or attempts, RUN@ID): config, code, data, environment, "
        "process layout and outcome.",
    )
    diff.add_argument("run_a", metavar="RUN_A")
    diff.add_argument("run_b", metavar="RUN_B")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    diff.set_defaults(func=cmd_compare)
    return diff


def _add_verify(sub: Subparsers) -> argparse.ArgumentParser:
    verify = sub.add_parser(
        "verify",
        help="recompute a run's checkpoint and data checksums against its provenance",
        description="Recompute the checksums of a run's checkpoints and data files and compare them with "
        "its provenance.json (every run `snakeddp runs` lists when RUN is left out: a run whose latest attempt has not "
        "finished as the attempt that last did). Exit status 1 if any differs.",
    )
    verify.add_argument("run", metavar="RUN", nargs="?", help="one run (default: every run `snakeddp runs` lists)")
    verify.set_defaults(func=cmd_verify)
    return verify


def _add_prune(sub: Subparsers) -> argparse.ArgumentParser:
    pruning = sub.add_parser(
        "prune",
        help="remove checkpoints of earlier attempts (records and metrics stay), or with --data unused datasets",
        description="Remove the checkpoints of runs' earlier attempts, keeping the N best and N most recent; "
        "their provenance and metrics stay (listed, comparable), pruned.json beside them says what went and when, "
        "and a run's current attempt is never pruned, nor, where that has not finished (failed, stopped, training), "
        "the last attempt that did: the run's only model. A pruned attempt has no model: putting its config back "
        "trains it again instead of restoring it. With --data, remove instead the dataset folders under "
        "results/data/ that the config does not plan (config/config.yaml with the --configfile and --config you gave "
        "snakemake), that no run's current attempt trained on, and that no earlier attempt whose checkpoints are "
        "still there trained on; results/data/pruned.json says what went and when, `snakeddp verify` of a run that "
        "trained on one says its data was pruned, and a config that asks for one again has the workflow make it again.",
    )
    pruning.add_argument("runs", metavar="RUN", nargs="*", help="runs whose earlier attempts to prune (default: all)")
    pruning.add_argument(
        "--best",
        type=count,
        default=None,
        metavar="N",
        help="keep the N attempts with the best score (trainer.monitor; default 1)",
    )
    pruning.add_argument(
        "--last", type=count, default=None, metavar="N", help="keep the N most recent attempts (default 1)"
    )
    pruning.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    pruning.add_argument(
        "--data", action="store_true", help="remove the datasets nothing needs any more, instead of checkpoints"
    )
    add_config_flags(pruning, "with --data: ", "its datasets stay")
    pruning.set_defaults(func=cmd_prune)
    return pruning


def _add_export(sub: Subparsers) -> argparse.ArgumentParser:
    exporting = sub.add_parser("export", help="the best checkpoint as model.safetensors + model.json")
    exporting.add_argument("run", metavar="RUN")
    exporting.add_argument("--to", type=Path, metavar="DIR", help="where to write (default: results/export/RUN)")
    exporting.set_defaults(func=cmd_export)
    return exporting


def _add_nodes(sub: Subparsers) -> argparse.ArgumentParser:
    nodes = sub.add_parser(
        "nodes",
        help="the ledger of nodes: each node's hangs, slow spells and failures",
        description="The checkout's ledger of nodes (results/nodes.json): per node its hangs, slow spells and "
        "failures, the runs' own hangs there (a run that hung at the same step on another node too: counted "
        "against no node), how many events fell in the last DAYS days, its last event, and whether a profile that "
        "places jobs on nodes leaves it out of train jobs (EVENTS or more in DAYS: the profile's "
        "site.exclude_after_events and site.exclude_within_days). --clear NODE forgets that node's events.",
    )
    nodes.add_argument("--clear", metavar="NODE", help="forget NODE's events, so jobs may be placed there again")
    nodes.add_argument("--events", type=count, default=ledger.EXCLUDE_AFTER_EVENTS, help="as site.exclude_after_events")
    nodes.add_argument("--days", type=float, default=ledger.EXCLUDE_WITHIN_DAYS, help="as site.exclude_within_days")
    nodes.set_defaults(func=cmd_nodes)
    return nodes


def _add_status(sub: Subparsers) -> argparse.ArgumentParser:
    live = sub.add_parser(
        "status",
        help="where every run of the checkout is now",
        description="One row per run: its state (queued, starting, training, hung, done, failed, stopped), epoch, "
        "step, samples/s, % complete and ETA, from results/runs/<run>/status.json (rank 0 rewrites it every 2 s; "
        "a done run's samples/s is the one `snakeddp runs` shows), "
        "and the runs their platform holds queued for this checkout. A run whose latest attempt has not finished "
        "(failed, stopped, training) gets a line naming the attempt that finished before it, as `snakeddp runs` lists "
        "it (RUN@ID), with its best score and best checkpoint (--json: the row's last_finished).",
    )
    live.add_argument("--json", action="store_true", help="print the rows as JSON")
    live.add_argument(
        "--configfile", nargs="+", action="extend", default=[], metavar="FILE", help="the config file(s) given to "
        "snakemake: its runs nothing has started yet are listed as not started"
    )  # fmt: skip
    live.add_argument(
        "--config", nargs="+", action="extend", default=[], metavar="KEY=VALUE", help="the --config given to "
        "snakemake, as typed there"
    )  # fmt: skip
    live.set_defaults(func=cmd_status)
    return live


def _add_warm(sub: Subparsers) -> argparse.ArgumentParser:
    warm = sub.add_parser(
        "warm",
        help="keep a warm process that many local invocations fork their jobs from",
        description="Start a warm process (torch, Lightning, numpy and snakeddp imported once), print "
        "`export SNAKEDDP_WARM_SOCKET=...` and keep it until Ctrl-C: every local invocation whose environment "
        "has that line forks its jobs from it instead of starting its own.",
    )
    warm.set_defaults(func=cmd_warm)
    return warm


if __name__ == "__main__":
    raise SystemExit(main())
