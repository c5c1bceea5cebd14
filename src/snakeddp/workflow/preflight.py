"""Checks made while Snakemake reads the workflow, before any job that costs something runs.

Each problem a job would only meet later (a launcher the profile cannot start, a strategy the
accelerator cannot run, a missing package, command, file or cloud setting, more threads than
cores) stops the workflow with one line and a HINT, and shows in ``snakemake -n`` too.
Nothing here imports torch: a user's ``model.target`` / ``data.module`` is imported by the
training interpreter in a subprocess, and only when its module file changed (``targets``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any, NoReturn

from snakeddp import cluster, compat
from snakeddp.config import ConfigError, site
from snakeddp.config import run_id as name_of
from snakeddp.errors import TrackerError
from snakeddp.run import requirements
from snakeddp.run.layout import RUN_ID_MAX, RUN_ID_PATTERN
from snakeddp.run.mlflow_server import check_reachable
from snakeddp.util import gpus
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.hashing import sha256_file
from snakeddp.workflow import slurm_nodes

# The keys that name a user's class (model.target, data.module), imported only by the training interpreter.
USER_CLASSES = (("model", "target"), ("data", "module"))


class PreflightError(ConfigError):
    """Something the workflow cannot start with; the message says what and how to fix it."""


def stop(error: Exception | str) -> NoReturn:
    """Print ``error`` once and end Snakemake with status 1. A WorkflowError raised while the
    Snakefile is read would be printed with its file, line and a traceback line around it."""
    print(error, file=sys.stderr, flush=True)
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
    run_id: str,
    launch: Mapping[str, Any],
    trainer: Mapping[str, Any],
    platform: str,
    site_config: Mapping[str, Any] | None = None,
) -> None:
    """The layout, launcher, accelerator and strategy of one run against the profile it runs on
    and what that profile declares its nodes have (``site_config``)."""
    site_config = site_config or {}
    where = f"run {run_id}: "
    try:
        cluster.for_platform(launch["launcher"], platform)
    except cluster.LaunchError as error:
        hint = (
            ""
            if "HINT:" in str(error)
            else (". HINT: use launch.launcher: auto (or torchrun, mpirun) here, or run with --profile profiles/slurm.")
        )
        raise PreflightError(f"{where}{error}{hint}") from None
    if platform == "local" and launch["nodes"] != 1:
        raise PreflightError(
            f"{where}launch.nodes={launch['nodes']}, but the local profile runs on this machine only. "
            "HINT: set launch.nodes: 1, or run with --profile profiles/slurm (or profiles/azureml)."
        )
    # On the local platform auto means the GPUs of this machine; on a cluster what its profile declares.
    try:
        accelerator = site.resolved(launch, platform, site_config, run_id=run_id)
    except site.SiteError as error:
        raise PreflightError(str(error)) from None
    check_gpus(run_id, launch, platform)
    try:
        requirements.check_strategy(trainer["strategy"], accelerator)
    except requirements.StrategyError as error:
        raise PreflightError(f"{where}{error}") from None


def check_gpus(run_id: str, launch: Mapping[str, Any], platform: str, env: Mapping[str, str] = os.environ) -> None:
    """A local run that asks for GPUs, against the GPUs this machine shows its processes (counted without
    torch, CUDA_VISIBLE_DEVICES applied): more ranks than GPUs would die in Lightning's device check."""
    if platform != "local" or launch["accelerator"] != "gpu":
        return
    shown, devices = len(gpus.visible(env)), launch["devices"]
    if shown >= devices:
        return
    if shown:
        hint = f"set launch.devices: {shown} or fewer (sweep only what fits)"
    elif gpus.installed():
        hint = f"leave {gpus.VISIBLE} unset"
    else:
        hint = "run it where there are GPUs (a cluster's profile)"
    raise PreflightError(
        f"run {run_id}: launch.accelerator: gpu asks for {devices} GPU{'s' if devices > 1 else ''} (launch.devices), "
        f"and this machine shows {gpus.describe(env)}. HINT: {hint}, or set launch.accelerator: auto to train "
        "what does not fit on the CPU."
    )


def note_accelerators(
    runs: Mapping[str, Mapping[str, Any]], platform: str, env: Mapping[str, str] = os.environ
) -> None:
    """A line for each local run that auto trains on the CPU although this machine has GPUs (fewer than its
    ranks: a 2-rank run on a one-GPU workstation), so the choice is seen before the run, not in its record."""
    shown = len(gpus.visible(env)) if platform == "local" else 0
    for run_id, run in runs.items():
        launch = run["config"]["launch"]
        if launch["accelerator"] == "auto" and 0 < shown < launch["devices"]:
            print(
                f"snakeddp: run {run_id}: {launch['devices']} ranks, and this machine shows {gpus.describe(env)}: "
                "launch.accelerator auto trains it on the CPU (launch.accelerator: gpu would refuse it instead).",
                file=sys.stderr,
                flush=True,
            )


def check_cores(runs: Mapping[str, Mapping[str, Any]], platform: str, cores: int) -> None:
    """Each local run's processes against the cores Snakemake may use. Checked when jobs are about
    to run (the Snakefile's onstart), not while the workflow is read: Snakemake reads it with 1 core
    for a dry run or --list-rules and with none for --report, --summary or --unlock, and none of
    those runs a job."""
    if platform != "local":
        return
    for run_id, run in runs.items():
        launch = run["config"]["launch"]
        threads = launch["devices"] * launch["threads_per_process"]
        if threads > cores:
            raise PreflightError(
                f"run {run_id}: needs {threads} cores (launch.devices={launch['devices']} x "
                f"launch.threads_per_process={launch['threads_per_process']}), but snakemake may use {cores}: its "
                f"processes would share cores and its timings would mean nothing. HINT: run with --cores {threads} "
                "(or more), or lower launch.devices or launch.threads_per_process."
            )


def note_cores(runs: Mapping[str, Mapping[str, Any]], platform: str, cores: int | None) -> None:
    """A dry run shows the plan whatever its cores, and notes what a real run would stop on."""
    if cores is None:
        return
    try:
        check_cores(runs, platform, cores)
    except PreflightError as error:
        print(f"Dry run; a real run would stop here: {error}", file=sys.stderr, flush=True)


def check_trackers(tracking: Mapping[str, Any]) -> None:
    for key in requirements.TRACKER_PACKAGES:
        if tracking.get(key, {}).get("enabled"):
            requirements.require_tracker(key)


def check_registry(tracking: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]) -> None:
    """tracking.mlflow.register_model needs MLflow on and a best checkpoint to export."""
    name = tracking["mlflow"]["register_model"]
    if name is None:
        return
    if not tracking["mlflow"]["enabled"]:
        raise PreflightError(
            f"tracking.mlflow.register_model={name!r} registers models in MLflow, and tracking.mlflow.enabled is "
            "false, so nothing would be registered. HINT: set tracking.mlflow.enabled: true (and its tracking_uri), "
            "or remove register_model."
        )
    for run_id, run in runs.items():
        if run["config"]["trainer"]["save_top_k"] == 0:
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


def check_tracking_server(
    tracking: Mapping[str, Any], to_train: Mapping[str, Any], platform: str, env: Mapping[str, str]
) -> None:
    """An MLflow server that does not answer stops the workflow before its first job, in seconds
    (``run.mlflow_server``). Only before runs that will train (``to_train``): a finished pipeline does
    not need the server. Not for AzureML, whose jobs reach the server from Azure, not from here."""
    uri = tracking["mlflow"]["tracking_uri"] or env.get("MLFLOW_TRACKING_URI")
    if not tracking["mlflow"]["enabled"] or not uri or not to_train or platform in ("azureml", "databricks"):
        return
    try:
        check_reachable(uri)
    except TrackerError as error:
        raise PreflightError(str(error)) from None


def check_slurm(which: Callable[[str], str | None] = shutil.which) -> None:
    # The executor plugin submits with sbatch and watches jobs with sacct (squeue without accounting).
    missing = [" or ".join(names) for names in (("sbatch",), ("sacct", "squeue")) if not any(map(which, names))]
    if missing:
        raise PreflightError(
            f"the slurm profile submits jobs with sbatch and watches them with sacct, and this machine has no "
            f"{' and no '.join(missing)} on PATH. HINT: run snakemake on the cluster's login node (where "
            "`sbatch --version` works), or run here with --profile profiles/local."
        )


def check_slurm_container(run_id: str, launch: Mapping[str, Any]) -> None:
    """A run on Slurm under ``--sdm apptainer``: the train rule runs inside the image, which has no
    Slurm client, so a launcher that calls srun there (srun itself, mpirun for its daemons) fails
    in the job with ``srun: not found``. Refused before anything is submitted."""
    launcher = cluster.for_platform(launch["launcher"], "slurm").name
    if launcher in ("srun", "mpirun"):
        raise PreflightError(
            f"run {run_id}: --sdm apptainer runs the train rule inside the image, which has no Slurm client, so "
            f"launcher {launcher} could not start the ranks (srun: not found). HINT: train on Slurm from the "
            "checkout's .venv (no --sdm) or with --sdm conda; the image serves the local and azureml profiles."
        )


def check_slurm_nodes(
    runs: Mapping[str, Mapping[str, Any]],
    platform: str,
    site_config: Mapping[str, Any],
    declared: Mapping[str, Any],
    nodes: slurm_nodes.TrainingNodes | None,
) -> None:
    """Each Slurm run to train (``runs``) against the nodes of its partition (``nodes``; None inside
    a job): a job no node can hold would pend for ever. ``declared``: the site as given, which the
    HINT's --config keeps."""
    if platform != "slurm" or nodes is None or not runs:
        return
    try:
        slurm_nodes.check(
            runs, lambda launch: site.resolved(launch, platform, site_config), site_config, declared, nodes
        )
    except slurm_nodes.SlurmNodesError as error:
        message = str(error)
        if "HINT:" not in message:
            message = (
                f"Slurm did not say what its nodes have ({message}), so no run's request could be checked against "
                "them. HINT: run snakemake where Slurm answers (a login node, where `sinfo` works)."
            )
        raise PreflightError(message) from None


def note_slurm_nodes(
    runs: Mapping[str, Mapping[str, Any]],
    platform: str,
    site_config: Mapping[str, Any],
    declared: Mapping[str, Any],
    nodes: slurm_nodes.TrainingNodes | None,
) -> None:
    """A dry run shows the plan whatever Slurm's nodes hold, and notes what a real run would stop on."""
    try:
        check_slurm_nodes(runs, platform, site_config, declared, nodes)
    except PreflightError as error:
        print(f"Dry run; a real run would stop here: {error}", file=sys.stderr, flush=True)


def check_spark(config: Mapping[str, Any]) -> None:
    """pyspark, a JDK and a master that answers (snakeddp.spark.master: no pyspark imported here)."""
    from snakeddp.spark import master

    try:
        master.check(config["spark"], os.environ)
    except master.SparkError as error:
        raise PreflightError(str(error)) from None


def check_databricks(config: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]) -> None:
    """databricks-sdk installed, and each run's request one the Jobs API takes (no credentials needed)."""
    # Imported here: databricks-sdk is an optional extra, and spec imports it only to build requests.
    from snakeddp.databricks import spec, workspace

    try:
        workspace.require_sdk()
        for run_id, run in runs.items():
            manifest, code = "results/data/manifest.json", "code/unstaged"  # the paths are checked when staged
            # The accelerator as the job will resolve it (auto: the profile's site), so a GPU run's cluster is checked.
            gpu = site.resolved(run["config"]["launch"], "databricks", config["site"], run_id=run_id) == "gpu"
            plan = spec.plan_for(
                run_id, run["config"], config["databricks"], manifest, code=code, gpu=gpu, variables={}
            )
            spec.submit_request(plan)
    except ConfigError as error:
        raise PreflightError(str(error)) from None


def check_databricks_credentials(config: Mapping[str, Any], to_train: Mapping[str, Any], platform: str) -> None:
    """databricks-sdk's credential chain resolves, before the first job, when a run will be submitted."""
    if platform != "databricks" or not to_train or not config["databricks"]["submit"]:
        return
    from snakeddp.databricks import workspace

    try:
        workspace.connect(config["databricks"]["profile"])
    except ConfigError as error:
        raise PreflightError(str(error)) from None


def check_azureml(raw: Mapping[str, Any], config: Mapping[str, Any], cwd: Path) -> None:
    if "azureml" not in raw:
        raise PreflightError(
            "the azureml profile needs an azureml: section (workspace, compute), and the config has none. "
            "HINT: copy the commented azureml: example from config/config.yaml into your config and fill in "
            "your workspace and compute (docs/azureml.md)."
        )
    # Imported here: the submitter's modules cost every other profile's dry run about 0.15 s.
    from snakeddp.azureml.settings import AzureMLError, Settings
    from snakeddp.azureml.submit import require_sdk

    try:
        settings = Settings.from_section(config["azureml"], cwd)
        require_sdk(settings.sdk)
        settings.require_compute()
        # The image's CUDA and torch's build must agree (environment.cuda): checked before any job.
        settings.base_image(config["environment"]["cuda"])
        if settings.submit:
            settings.require_workspace()
    except AzureMLError as error:
        raise PreflightError(str(error)) from None


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


def check_targets(targets: list[tuple[str, str]], python: str, cwd: Path, env: Mapping[str, str], cache: Path) -> None:
    """Import each configured class (``("model.target", "pkg.mod:Class")``) in the training interpreter
    and check its kind. A check that passed is remembered by the module file's sha256: importing
    torch costs seconds, and a dry run should not pay them every time."""
    search = [str(cwd), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)), *sys.path[1:]]
    known = read_json(cache) if cache.is_file() else {}
    stamps, todo = {}, []
    for key, target in targets:
        found = module_file(target.partition(":")[0], search)
        stamp = f"{python} {sha256_file(found)}" if found else None
        if stamp is None or known.get(f"{key}={target}") != stamp:
            todo += [key, target]
        if stamp:
            stamps[f"{key}={target}"] = stamp
    if not todo:
        return
    argv = [python, "-m", "snakeddp.config.targets", *todo]
    done = subprocess.run(argv, cwd=cwd, env=dict(env), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PreflightError((done.stderr.strip().splitlines() or [f"{' '.join(argv)} failed"])[-1])
    atomic_write_json(cache, {**known, **stamps})


def check_workflow(
    raw: Mapping[str, Any],
    config: Mapping[str, Any],
    runs: Mapping[str, Mapping[str, Any]],
    platform: str,
    *,
    lock: Path,
    same_interpreter: bool,
    cache: Path,
    in_container: bool = False,
) -> None:
    """Every early check for one invocation; ``raw`` is the config as given, ``config`` validated.
    Packages, Lightning's release and user classes are checked only when the jobs run in this
    interpreter (no conda env, no container) on this machine or a cluster sharing it (not AzureML,
    whose image has its own). ``in_container``: the rules run in ``--sdm apptainer``'s image.
    Cores are checked later (``check_cores``)."""
    check_lock(lock)
    check_run_ids(runs)
    check_registry(config["tracking"], runs)
    # The platform's own needs first: a run's request means nothing where the platform cannot start.
    if platform == "slurm":
        check_slurm()
    if platform == "azureml":
        check_azureml(raw, config, Path.cwd())
    if platform == "spark":
        check_spark(config)
    if platform == "databricks":
        check_databricks(config, runs)
    for run_id, run in runs.items():
        check_run(run_id, run["config"]["launch"], run["config"]["trainer"], platform, config["site"])
        if platform == "slurm" and in_container:
            check_slurm_container(run_id, run["config"]["launch"])
    if platform not in ("azureml", "databricks") and same_interpreter:
        # A Lightning release the training's hooks were not read for would stop every run's ranks.
        compat.check_package("lightning")
        check_trackers(config["tracking"])
        targets = sorted(
            {(f"{part}.{key}", run["config"][part][key]) for run in runs.values() for part, key in USER_CLASSES}
            - {(f"{part}.{key}", None) for part, key in USER_CLASSES}
        )
        if targets:
            check_targets(targets, sys.executable, Path.cwd(), os.environ, cache)
