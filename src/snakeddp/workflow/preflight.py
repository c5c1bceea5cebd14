"""Checks made while Snakemake reads the workflow, before any job that costs something runs.

Each problem a job would only meet later (a launcher the profile cannot start, a strategy the
accelerator cannot run, a missing package, command, file or cloud setting, more threads than
cores) stops the workflow with one line and a HINT, and shows in ``snakemake -n`` too.
Nothing here imports torch: a user's ``model.target`` / ``data.module`` is imported by the
training interpreter in a subprocess, and only when its module file changed (``targets``). What a
platform needs is its own contract's to check (``snakeddp.contract``), asked from here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any, NoReturn

from snakeddp import cluster, compat, platforms
from snakeddp.config import run_id as name_of
from snakeddp.config import secret_home, site
from snakeddp.config import targets as targets_module
from snakeddp.config.parts import Launch, Site, Tracking, Trainer
from snakeddp.contract import Invocation, PreflightError
from snakeddp.errors import TrackerError, print_line
from snakeddp.run import requirements
from snakeddp.run.layout import RUN_ID_MAX, RUN_ID_PATTERN
from snakeddp.run.mlflow_server import check_reachable, split_credentials
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.hashing import sha256_file
from snakeddp.util.redact import redact_text

# The keys that name a user's class (model.target, data.module), imported only by the training interpreter, and
# the keys of their constructor arguments.
USER_CLASSES = (("model", "target", "kwargs"), ("data", "module", "module_kwargs"))


__all__ = ["PreflightError"]


def stop(error: Exception | str) -> NoReturn:
    """Print ``error`` once and end Snakemake with status 1. A WorkflowError raised while the
    Snakefile is read would be printed with its file, line and a traceback line around it."""
    print_line(redact_text(str(error)))  # a URL's credentials, quoted from the config
    raise SystemExit(1)


def check_run_ids(runs: Mapping[str, Mapping[str, Any]]) -> None:
    """Every planned run id must be a name Snakemake accepts for the run wildcard: matched by its
    constraint, short enough for a file name, and not periodic (Snakemake takes a value that repeats
    one piece 20 times for a runaway recursion, and skips or fails that job)."""
    from snakemake.io import PeriodicityDetector

    periodic = PeriodicityDetector()
    for rid, run in runs.items():
        repeated = periodic.is_periodic(rid)
        if re.fullmatch(RUN_ID_PATTERN, rid) and len(rid) <= RUN_ID_MAX and repeated is None:
            continue
        key = max(run["point"], key=lambda k: len(name_of({k: run["point"][k]})))
        why = (
            f"repeats '{repeated}' over and over"
            if repeated
            else f"is {len(rid)} characters long (at most {RUN_ID_MAX})"
        )
        shown = repr(run["point"][key])
        shown = shown if len(shown) <= 60 else f"{shown[:56]}...{shown[-1]}"
        raise PreflightError(
            f"sweep: the run name made from {key}={shown} {why}, which Snakemake cannot use as a run "
            f"name. HINT: sweep shorter values of {key}, or, if it takes one value, set it outside sweep:."
        )


def check_working_directory(cwd: Path, checkout: Path) -> None:
    """Relative paths (config/config.yaml, results/, profiles/) start where snakemake runs."""
    cwd, checkout = cwd.resolve(), checkout.resolve()
    if cwd != checkout and cwd.is_relative_to(checkout):
        raise PreflightError(
            f"snakemake runs in {cwd}, a subdirectory of the checkout: config/config.yaml, profiles/ and "
            f"results/ are relative to where it runs. HINT: cd {checkout} and run snakemake there."
        )


def check_lock(path: Path) -> None:
    if not path.is_file():
        raise PreflightError(
            f"environment.lock: {path} does not exist, so no environment record can hash it. HINT: point "
            "environment.lock at your site's lock file, or set it to null for this checkout's envs/requirements.lock."
        )


def check_run(
    invocation: Invocation[Any],
    run_id: str,
    launch: Launch,
    trainer: Trainer,
    platform: str,
    site_config: Site,
) -> None:
    """The layout, launcher, accelerator, strategy and precision of one run against the profile it runs on
    and what that profile declares its nodes have (``site_config``)."""
    where = f"run {run_id}: "
    try:
        cluster.for_platform(launch.launcher, platform)
    except cluster.LaunchError as error:  # its HINT names the profile (platforms' rows) or auto
        raise PreflightError(f"{where}{error}") from None
    platforms.load(platform).check_run(invocation, run_id, launch)
    # On the local platform auto means the GPUs of this machine; on a cluster what its profile declares.
    try:
        accelerator = site.resolved(launch, platform, site_config, run_id=run_id)
    except site.SiteError as error:
        raise PreflightError(str(error)) from None
    try:
        requirements.check_strategy(trainer.strategy, accelerator, launch.accelerator)
        requirements.check_precision(trainer.precision, accelerator, launch.accelerator)
    except (requirements.StrategyError, requirements.PrecisionError) as error:
        raise PreflightError(f"{where}{error}") from None


def check_trackers(tracking: Tracking) -> None:
    requirements.require_trackers([key for key in requirements.TRACKER_PACKAGES if getattr(tracking, key).enabled])


def check_registry(tracking: Tracking, runs: Mapping[str, Mapping[str, Any]]) -> None:
    """tracking.mlflow.register_model needs MLflow on and a best checkpoint to export."""
    name = tracking.mlflow.register_model
    if name is None:
        return
    if not tracking.mlflow.enabled:
        raise PreflightError(
            f"tracking.mlflow.register_model={name!r} registers models in MLflow, and tracking.mlflow.enabled is "
            "false, so nothing would be registered. HINT: set tracking.mlflow.enabled: true (and its tracking_uri), "
            "or remove register_model."
        )
    for run_id, run in runs.items():
        if Trainer.of(run["config"]["trainer"]).save_top_k == 0:
            raise PreflightError(
                f"run {run_id}: tracking.mlflow.register_model={name!r} registers the best checkpoint, and "
                "trainer.save_top_k: 0 keeps only last.ckpt. HINT: set trainer.save_top_k: 1 (or more), or remove "
                "register_model."
            )


def check_report_made(page: Path) -> None:
    """``snakemake --report`` packs the report the workflow made: before that, say so in one line
    instead of Snakemake's warning per missing record and its error naming one missing figure."""
    if not page.is_file():
        raise PreflightError(
            f"Nothing to report yet: the workflow has not made its report ({page} is missing). "
            "HINT: run the workflow first (snakemake --profile local), then the same --report command."
        )


def stop_unless_report_made(page: Path) -> None:
    """``check_report_made``, the refusal printed once and the workflow ended (Snakemake calls this before
    it packs a report: snakeddp.compat.snakemake.before_report)."""
    try:
        check_report_made(page)
    except PreflightError as error:
        stop(error)


def check_tracking_server(
    tracking: Tracking, to_train: Mapping[str, Any], platform: str, env: Mapping[str, str]
) -> None:
    """An MLflow server that does not answer stops the workflow before its first job, in seconds
    (``run.mlflow_server``). Only before runs that will train (``to_train``): a finished pipeline does
    not need the server. Not for a remote platform, whose jobs reach the server from there, not from here."""
    uri = tracking.mlflow.tracking_uri or env.get("MLFLOW_TRACKING_URI")
    if not tracking.mlflow.enabled or not uri or not to_train:
        return
    if platforms.load(platform).remote:
        check_no_password_travels(tracking.mlflow.tracking_uri, platform)
        return
    try:
        check_reachable(uri)
    except TrackerError as error:
        raise PreflightError(str(error)) from None


def check_no_password_travels(configured_uri: str | None, platform: str) -> None:
    """A remote job carries the tracking section in its spec (AzureML's job.yml, the Databricks request), which
    its workspace keeps and shows: a tracking URI holding user:password@ is refused before it is written there.
    (MLFLOW_TRACKING_URI and MLflow's credential variables where snakemake runs do not travel to the job.)"""
    if not configured_uri:
        return
    _, username, password = split_credentials(configured_uri)
    if not username and not password:
        return
    home = platforms.row(platform).tracking_login or secret_home(platform, "MLFLOW_TRACKING_PASSWORD")
    raise PreflightError(
        f"tracking.mlflow.tracking_uri holds credentials ({redact_text(configured_uri)}), and a {platform} job "
        f"carries its tracking settings in the job's spec, which the workspace keeps for whoever reads the job. "
        f"HINT: remove user:password@ from tracking.mlflow.tracking_uri; {home}."
    )


def module_file(module: str, search: list[str]) -> Path | None:
    """The file of ``module`` found along ``search`` without importing anything (None if not found)."""
    parts = module.split(".")
    path: list[str] | None = search
    spec = None
    for depth in range(1, len(parts) + 1):
        spec = PathFinder.find_spec(".".join(parts[:depth]), path) if path else None
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    origin = Path(spec.origin) if spec and spec.origin else None
    return origin if origin and origin.is_file() else None


def user_classes(runs: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Each user class the runs name (model.target, data.module), with the names of the constructor arguments
    any run gives it (model.kwargs, data.module_kwargs), comma-separated."""
    names: dict[tuple[str, str], set[str]] = {}
    for run in runs.values():
        for part, key, arguments in USER_CLASSES:
            target = run["config"][part].get(key)
            if target:
                names.setdefault((f"{part}.{key}", target), set()).update(run["config"][part].get(arguments) or {})
    return [(key, target, ",".join(sorted(given))) for (key, target), given in sorted(names.items())]


def check_targets(
    targets: list[tuple[str, str, str]], python: str, cwd: Path, env: Mapping[str, str], cache: Path
) -> None:
    """Import each configured class (``("model.target", "pkg.mod:Class", "width,depth")``: its config arguments'
    names) in the training interpreter and check its kind and that it takes them. A check that passed is
    remembered by the module file's sha256: importing torch costs seconds, and a dry run should not pay them
    every time."""
    search = [str(cwd), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)), *sys.path[1:]]
    known = read_json(cache) if cache.is_file() else {}
    stamps, todo = {}, []
    for key, target, names in targets:
        found = module_file(target.partition(":")[0], search)
        # The checker's own code joins the stamp: a pass it remembers from an earlier snakeddp skipped a check
        # added since (a constructor parameter the config does not give, refused only by the train job).
        stamp = f"{python} {sha256_file(found)} {sha256_file(targets_module.__file__)[:16]}" if found else None
        # The arguments' names join the key: a config that sets another one is checked again.
        checked = f"{key}={target}" + (f"({names})" if names else "")
        if stamp is None or known.get(checked) != stamp:
            todo += [key, target, names]
        if stamp:
            stamps[checked] = stamp
    if not todo:
        return
    argv = [python, "-m", "snakeddp.config.targets", *todo]
    done = subprocess.run(argv, cwd=cwd, env=dict(env), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PreflightError((done.stderr.strip().splitlines() or [f"{' '.join(argv)} failed"])[-1])
    atomic_write_json(cache, {**known, **stamps})


def check_workflow(invocation: Invocation[Any], platform: str, *, lock: Path, cache: Path) -> None:
    """Every early check for one invocation (its config as given, validated, its runs, where its rules run).
    Packages, Lightning's release and user classes are checked only when the jobs run in this
    interpreter (no conda env, no container) on this machine or a cluster sharing it (not on a remote
    platform, whose image has its own). Cores are checked later (``check_cores``)."""
    config, runs, contract = invocation.config, invocation.runs, platforms.load(platform)
    check_lock(lock)
    check_run_ids(runs)
    tracking = Tracking.of(config["tracking"])
    check_registry(tracking, runs)
    # The platform's own needs first: a run's request means nothing where the platform cannot start.
    contract.check(invocation)
    site_config = Site.of(config["site"])
    for run_id, run in runs.items():
        launch, trainer = Launch.of(run["config"]["launch"]), Trainer.of(run["config"]["trainer"])
        check_run(invocation, run_id, launch, trainer, platform, site_config)
    if not contract.remote and invocation.same_interpreter:
        # A Lightning release the training's hooks were not read for would stop every run's ranks.
        compat.check_package("lightning")
        check_trackers(tracking)
        targets = user_classes(runs)
        if targets:
            check_targets(targets, sys.executable, Path.cwd(), os.environ, cache)
