"""Snakemake's private parts that the workflow relies on; imported by the Snakefile, which runs inside Snakemake.

Nothing here imports Snakemake: the Snakefile hands over its ``workflow`` object. What the terminal
needs from Snakemake's logging goes through its logger plugin interface instead
(snakemake_logger_plugin_snakeddp); what is left here is out of that interface's reach, each
function saying why.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from snakeddp.compat import check, check_package

check_package("snakemake")

# Where Snakemake's scheduler makes its re-evaluation timers: snakemake.scheduler until 9.10.
_SCHEDULER_MODULES = ("snakemake.scheduling.job_scheduler", "snakemake.scheduler")
_REEVALUATION = "JobScheduler._schedule_reevalutation."  # sic: Snakemake's spelling


def release_scheduler_timers() -> int:
    """Cancel the timers Snakemake's scheduler left pending; returns how many. Call when it is done.

    With ``--max-jobs-per-timespan`` (default 100/1s) every scheduling pass that waits starts a
    non-daemon ``threading.Timer`` that wakes the scheduler again a second later. After the
    last job the newest of them keeps the finished process alive until it fires: up to 1 s at
    the end of every ``snakemake`` that ran a job (bench/results.md, 8.). In ``onsuccess``/``onerror``
    nothing is left to schedule, so waking the scheduler is moot.
    """
    cancelled = 0
    for thread in threading.enumerate():
        function = getattr(thread, "function", None)
        if (
            isinstance(thread, threading.Timer)
            and getattr(function, "__module__", None) in _SCHEDULER_MODULES
            and getattr(function, "__qualname__", "").startswith(_REEVALUATION)
        ):
            thread.cancel()
            cancelled += 1
    return cancelled


def keep_profile_config(workflow: Any, entries: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Put the profile's ``config:`` ``entries`` under what was typed, key by key, for this process
    and the jobs it spawns; returns (the profile's config, the config typed with --config and
    --configfile). Snakemake takes a profile's ``config:`` only as the default of ``--config``,
    so any typed ``--config`` dropped it (and the profile's platform with it). Call before ``configfile:``.
    """
    check("profile_config")
    from snakemake.cli import parse_config
    from snakemake.common.configfile import load_configfile
    from snakemake.utils import update_config

    settings = workflow.config_settings
    given = list(settings.config_args or ())
    # Nothing typed: Snakemake already took the profile's list as the --config default.
    typed_entries = [] if given == list(entries) else given
    typed: dict[str, Any] = {}
    for path in settings.configfiles:
        update_config(typed, load_configfile(str(path)))
    update_config(typed, parse_config(typed_entries))
    merged = [*entries, *typed_entries]
    # Snakemake's own precedence, as when nothing is typed: config files, then --config (the
    # profile's entries first, the typed ones over them).
    settings.config = parse_config(merged)
    settings.config_args = merged
    overwrite = settings.overwrite_config
    overwrite.clear()
    update_config(overwrite, settings._get_overwrite_config())
    return parse_config(list(entries)), typed


def set_aside_profile_config(workflow: Any, typed: Mapping[str, Any]) -> dict[str, Any]:
    """Take the profile's ``config:`` out of the command-line config while ``configfile:`` loads,
    when nothing else was typed: Snakemake announces any command-line config as "Config file ... is
    extended by additional config", and a profile's own settings are no news to the user. Give
    what it returns to ``put_back_profile_config`` after ``configfile:``."""
    overwrite = workflow.config_settings.overwrite_config
    if typed or not overwrite:
        return {}
    aside = dict(overwrite)
    overwrite.clear()
    return aside


def put_back_profile_config(workflow: Any, config: MutableMapping[str, Any], aside: Mapping[str, Any]) -> None:
    """Undo ``set_aside_profile_config`` once the config file is loaded: the profile's settings hold again."""
    from snakemake.utils import update_config

    workflow.config_settings.overwrite_config.update(aside)
    update_config(config, dict(aside))


def linting(workflow: Any) -> bool:
    """Whether Snakemake builds the workflow for ``--lint``, which runs no job: the one mode that
    builds it without checking environment variables."""
    return not workflow.check_envvars


def pending_jobs(workflow: Any) -> list[tuple[str, dict[str, str]]]:
    """The jobs this invocation will run, as (rule name, wildcards), once its DAG is built (onstart)."""
    check("pending_jobs")
    dag = workflow.dag
    return [] if dag is None else [(job.rule.name, dict(job.wildcards_dict)) for job in dag.needrun_jobs()]


def name_params_changes(describe: Callable[[Iterable[str], Iterable[str]], str]) -> bool:
    """Word a params change as ``describe(only_old, only_new)`` says (``model.lr: 0.003 → 0.01``)
    instead of both serialized values, and list its files only when something changed (9.27.1's
    ``--list-changes params`` listed every output ever recorded). False: left to Snakemake.

    Not a logger plugin's: a job's record carries its reason already as a string, both values
    serialized, and ``--list-changes`` prints without the logger; only ParamsChange holds the keys."""
    if not check("params_change_words"):
        return False
    from snakemake.persistence import ParamsChange

    ParamsChange.__str__ = lambda self: describe(self.only_old, self.only_new) if self else "No params change"
    ParamsChange.__iter__ = lambda self: iter(self.files if self else ())
    return True


def before_report(first: Callable[[], None]) -> bool:
    """Call ``first()`` when ``snakemake --report`` is about to pack the report, before Snakemake
    reads any record (it may stop the workflow). False: left to Snakemake.

    Not a logger plugin's: Snakemake logs nothing before it packs the report, and a plugin's
    handler runs on Snakemake's logging thread, from which it could not stop the workflow."""
    if not check("report_before_a_run"):
        return False
    import snakemake.report

    packs = snakemake.report.auto_report
    if getattr(packs, "checked_by_snakeddp", False):
        return True

    async def checked(*args: Any, **kwargs: Any) -> Any:
        first()
        return await packs(*args, **kwargs)

    checked.checked_by_snakeddp = True  # type: ignore[attr-defined]
    # Workflow.create_report imports auto_report from its module when --report runs, so it gets this one.
    snakemake.report.auto_report = checked
    return True


def no_retry_when(refused: Callable[[str, Mapping[str, str]], bool]) -> bool:
    """Retry no failed job for which ``refused(rule, wildcards)`` is true, whatever ``retries`` says; the others
    as Snakemake would. False: left to Snakemake (every failed job retried).

    Snakemake retries a failed job ``retries`` times whatever it failed on (JobScheduler._handle_error asks
    ``job.restart_times``, which is the rule's), and the Slurm plugin leaves that to it; no interface lets a
    job say that another attempt would meet the same end. A train job whose ranks the machine refused (their
    build, GPU, MIG, precision: snakeddp.errors.MachineRefusal) says so in its run directory, and is queued
    once, not ``retries`` more times."""
    if not check("no_retry"):
        return False
    from snakemake.jobs import Job

    installed = getattr(Job.restart_times.fget, "refusals_by_snakeddp", None)
    if installed is not None:  # the Snakefile read again in this process: the newest test counts
        installed[:] = [refused]
        return True
    rules_say = Job.restart_times.fget
    refusals = [refused]

    def restart_times(job: Any) -> int:
        if any(said(job.rule.name, dict(job.wildcards_dict)) for said in refusals):
            return 0
        return rules_say(job)

    restart_times.refusals_by_snakeddp = refusals  # type: ignore[attr-defined]
    Job.restart_times = property(restart_times)
    return True


def workflow_locks(workdir: Path) -> list[Path]:
    """The lock files of a Snakemake that runs in ``workdir`` (or was killed there and not unlocked since): its file
    persistence keeps ``.snakemake/locks/<n>.input.lock`` and ``<n>.output.lock`` for as long as it runs, and
    ``--unlock`` removes them. No public interface says whether a workflow runs in a directory."""
    return sorted((Path(workdir) / ".snakemake" / "locks").glob("*.lock"))
