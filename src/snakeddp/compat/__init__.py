"""Every use snakeddp makes of a private part of an upstream package, and the versions it was read against.

Private methods and undocumented behaviour change between releases without notice, so each such
hook lives in this package, one module per upstream package (``lightning``, ``snakemake``,
``snakemake_executor_plugin_slurm``, ``azure_ai_ml``, ``azureml_core``), and ``WRITTEN_FOR`` is the one
table of the releases whose source each hook was written from. A module checks its rows when it is
imported: on a release nobody read, it stops with one line and a HINT instead of misbehaving in the
middle of a run.
pyproject.toml's ranges for these packages are the table's (tests/test_compat.py holds them
together), so ``pip install .`` never installs a release the hooks refuse.

This module imports none of those packages (it reads the installed version from the package's
metadata), so checking costs nothing that the caller did not already pay.

May import: ``errors`` (the floors below its own: tests/test_floors.py).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

from snakeddp.errors import UpstreamVersionError


@dataclass(frozen=True)
class Hook:
    """A private part of ``package`` that snakeddp relies on."""

    package: str
    """The distribution, as pip names it."""
    versions: str
    """The releases whose source was read for this hook (a PEP 440 specifier)."""
    source: str
    """Where in the package's source the hook is, to read for another release."""
    optional: bool = False
    """A hook that only words upstream's messages (why a job reruns, --report before a report exists): on a
    release nobody read it is left out and upstream's own wording stays, instead of a refusal."""


# Every release in each range of a required hook was read (lightning: 2.6.0, 2.6.1, 2.6.4, 2.6.5 and 2.6.6, all of 2.6;
# snakemake: 9.0.0 to 9.27.1; azure-ai-ml: 1.35.0 to 1.35.2; azureml-core: 1.60.0 to 1.61.0.post4, post
# releases included) and the parts named in ``source`` are the same in each.
WRITTEN_FOR: dict[str, Hook] = {
    "sigterm_broadcast": Hook(
        "lightning",
        ">=2.6.0,<=2.6.6",
        "lightning/pytorch/loops/training_epoch_loop.py (_broadcast_sigterm_tensor), "
        "lightning/pytorch/trainer/connectors/signal_connector.py (_sigterm_notifier_fn)",
    ),
    "last_checkpoint": Hook(
        "lightning",
        ">=2.6.0,<=2.6.6",
        "lightning/pytorch/callbacks/model_checkpoint.py (_save_last_checkpoint, _monitor_candidates, "
        "_should_save_on_train_epoch_end)",
    ),
    "fit_position": Hook(
        "lightning",
        ">=2.6.0,<=2.6.6",
        "lightning/pytorch/trainer/call.py (_call_lightning_module_hook, _call_callback_hooks, _call_strategy_hook "
        "set LightningModule._current_fx_name), lightning/pytorch/loops/training_epoch_loop.py (batch_progress, "
        "val_loop.batch_progress)",
    ),
    "scheduler_timers": Hook(
        "snakemake",
        ">=9.0.0,<=9.27.1",
        "snakemake/scheduling/job_scheduler.py, before 9.10 snakemake/scheduler.py (_schedule_reevalutation)",
    ),
    "profile_config": Hook(
        "snakemake",
        ">=9.0.0,<=9.27.1",
        "snakemake/workflow.py (Workflow.configfile), snakemake/settings/types.py (ConfigSettings: config, "
        "config_args, overwrite_config, _get_overwrite_config), snakemake/cli.py (parse_config, get_profile_dir)",
    ),
    # Read in 9.27.1; DAG.needrun_jobs and Job.rule/wildcards_dict are the same in 8.x's source.
    "pending_jobs": Hook(
        "snakemake", ">=9.0.0,<=9.27.1", "snakemake/dag.py (DAG.needrun_jobs), snakemake/jobs.py (Job.wildcards_dict)"
    ),
    "lint_mode": Hook(
        "snakemake", ">=9.0.0,<=9.27.1", "snakemake/api.py (lint builds the workflow with check_envvars=False)"
    ),
    # Read against 9.27.1 only: optional, so the workflow runs on the rest of the range in upstream's words.
    "params_change_words": Hook(
        "snakemake", "==9.27.1", "snakemake/persistence.py (ParamsChange: only_old, only_new, files)", optional=True
    ),
    "report_before_a_run": Hook(
        "snakemake",
        "==9.27.1",
        "snakemake/workflow.py (Workflow.create_report imports snakemake.report.auto_report when called), "
        "snakemake/report/__init__.py (auto_report)",
        optional=True,
    ),
    # Read in 9.27.1 only: optional, so on another release a job the machine refused is retried as any other.
    "no_retry": Hook(
        "snakemake",
        "==9.27.1",
        "snakemake/jobs.py (Job.restart_times, Job.rule, Job.wildcards_dict; GroupJob.restart_times asks its "
        "jobs), snakemake/scheduling/job_scheduler.py (JobScheduler._handle_error)",
        optional=True,
    ),
    # Read in 2.8.0 only: optional, so on another release the Slurm watch for jobs that can never start is off.
    "cancelled_job_state": Hook(
        "snakemake-executor-plugin-slurm",
        "==2.8.0",
        "snakemake_executor_plugin_slurm/__init__.py (check_active_jobs, its failed states; query_job_status)",
        optional=True,
    ),
    # Read in 2.8.0 only: optional, so on another release a hung run's retry is submitted without --exclude.
    "submit_command": Hook(
        "snakemake-executor-plugin-slurm",
        "==2.8.0",
        "snakemake_executor_plugin_slurm/__init__.py (run_job and run_array_jobs call the module's "
        "get_submit_command with failed_nodes), snakemake_executor_plugin_slurm/submit_string.py (--exclude)",
        optional=True,
    ),
    # Read in 2.8.0 only: optional, so on another release the plugin's status checks keep its own waits.
    "status_checks": Hook(
        "snakemake-executor-plugin-slurm",
        "==2.8.0",
        "snakemake_executor_plugin_slurm/__init__.py (Executor.check_active_jobs: next_seconds_between_status_checks "
        "10 s longer after a check in which no job ended, up to max_sleep_time)",
        optional=True,
    ),
    "job_yaml": Hook("azure-ai-ml", ">=1.35.0,<=1.35.2", "azure/ai/ml/entities/_builders/command.py (Command._to_job)"),
    "output_data": Hook(
        "azureml-core", ">=1.60.0,<=1.61.0.post4", "azureml/data/output_dataset_config.py (_to_output_data)"
    ),
}


def installed_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        raise UpstreamVersionError(
            f"snakeddp needs {package}, which is not installed here. HINT: install the pinned environment "
            "(make setup, from envs/requirements.lock)."
        ) from None


def check(hook: str, version: str | None = None) -> bool:
    """Refuse a release of the hook's package that it was not written for (an optional hook: say
    False, to be left out); ``version``: the release to check (default: the installed one)."""
    written = WRITTEN_FOR[hook]
    version = version or installed_version(written.package)
    applies = SpecifierSet(written.versions).contains(version, prereleases=True)
    if not applies and not written.optional:
        raise UpstreamVersionError(
            f"snakeddp.compat: {hook} was written for {written.package}{written.versions}, found {version}. "
            "HINT: install the pinned environment (make setup, from envs/requirements.lock), or read "
            f"{written.source} of {written.package} {version} and widen WRITTEN_FOR in snakeddp/compat/__init__.py."
        )
    return applies


def check_package(package: str, version: str | None = None) -> None:
    """``check`` every hook into ``package``."""
    version = version or installed_version(package)
    for hook, written in WRITTEN_FOR.items():
        if written.package == package:
            check(hook, version)
