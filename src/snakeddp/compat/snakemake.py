"""Snakemake's private parts that the workflow relies on; imported by the Snakefile, which runs inside Snakemake.

Nothing here imports Snakemake: the Snakefile hands over its ``workflow`` object.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, MutableMapping
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


def set_aside_profile_platform(workflow: Any) -> str | None:
    """Take a profile's ``config: platform=...`` out of the command-line config, when it is all there is.

    Snakemake announces any command-line config as "Config file ... is extended by additional
    config" when ``configfile:`` loads a file; a profile's platform alone is no news to the user.
    Call before ``configfile:`` and give what it returns to ``put_back_profile_platform`` after.
    """
    overwrite = workflow.config_settings.overwrite_config
    return overwrite.pop("platform") if set(overwrite) == {"platform"} else None


def put_back_profile_platform(workflow: Any, config: MutableMapping[str, Any], platform: str | None) -> None:
    """Undo ``set_aside_profile_platform`` once the config file is loaded: the platform is the profile's again."""
    if platform is not None:
        workflow.config_settings.overwrite_config["platform"] = platform
        config["platform"] = platform


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
    ``--list-changes params`` listed every output ever recorded). False: left to Snakemake."""
    if not check("params_change_words"):
        return False
    from snakemake.persistence import ParamsChange

    ParamsChange.__str__ = lambda self: describe(self.only_old, self.only_new) if self else "No params change"
    ParamsChange.__iter__ = lambda self: iter(self.files if self else ())
    return True


def before_report(first: Callable[[], None]) -> bool:
    """Call ``first()`` when ``snakemake --report`` is about to pack the report, before Snakemake
    reads any record (it may stop the workflow). False: left to Snakemake."""
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


def quiet_job_errors(once: Callable[[], bool]) -> bool:
    """Drop Snakemake's records of failed jobs (``ERROR``, ``JOB_ERROR``, ``GROUP_ERROR`` events:
    the exception, "Error in rule" with the job's whole log, the final WorkflowError) once
    ``once()`` is true (Ctrl-C came: the jobs were stopped, not broken). False: left to Snakemake."""
    if not check("job_errors_after_ctrl_c"):
        return False
    from snakemake.logging import logger
    from snakemake_interface_logger_plugins.common import LogEvent

    errors = {LogEvent.ERROR, LogEvent.JOB_ERROR, LogEvent.GROUP_ERROR}
    logger.addFilter(lambda record: not (once() and getattr(record, "event", None) in errors))
    return True


# The line Snakemake's formatter puts above each job: time.asctime() in brackets.
_JOB_TIME = re.compile(r"^(\s*)\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]\n")
_SCHEDULING = "Select jobs to execute..."


class _WithoutJobTimes(logging.Formatter):
    """Snakemake's formatter, less the time line above each job (its complete log keeps it)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return _JOB_TIME.sub(r"\1", self.inner.format(record), count=1)


def quiet_scheduling(workflow: Any) -> bool:
    """On Snakemake's terminal (its stream handler), keep per job what it does and why (the
    message and ``Reason:``) and the ``k of N steps done`` line, and drop the scheduler's chatter
    around them: "Select jobs to execute...", "Execute N jobs...", "Finished jobid: ..." and the
    time line above each job and each finish, about 6 of 9 lines per job. The complete log
    (.snakemake/log) keeps every line; ``--verbose`` shows them all on the terminal too, and
    ``--quiet``, ``--printshellcmds`` act as Snakemake's own filter says. False: left to Snakemake."""
    if not check("scheduling_chatter") or workflow.output_settings.verbose:
        return False
    from snakemake.logging import logger
    from snakemake_interface_logger_plugins.common import LogEvent

    dropped = {LogEvent.JOB_STARTED, LogEvent.JOB_FINISHED}

    def chatter(record: logging.LogRecord) -> bool:
        return getattr(record, "event", None) in dropped or record.msg == _SCHEDULING

    quieted = False
    for handler in logger.handlers:
        # A logger plugin writing to the stream (--logger) has its own format: left as it is.
        if handler.name != "DefaultStreamHandler" or isinstance(handler.formatter, _WithoutJobTimes):
            continue
        handler.addFilter(lambda record: not chatter(record))
        handler.setFormatter(_WithoutJobTimes(handler.formatter or logging.Formatter()))
        quieted = True
    return quieted
