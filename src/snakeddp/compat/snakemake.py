"""Snakemake's private parts that the workflow relies on; imported by the Snakefile, which runs inside Snakemake.

Nothing here imports Snakemake: the Snakefile hands over its ``workflow`` object.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping
from typing import Any

from snakeddp.compat import check_package

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


def cores_unless_linting(workflow: Any) -> int | None:
    """The cores Snakemake may use, or None under ``--lint``, which runs no job and always reports 1.

    ``--lint`` is the one mode that builds the workflow without checking environment variables.
    (``--touch`` cannot be told apart here: Snakemake 9 sets it after parsing.)
    """
    return workflow.cores if workflow.check_envvars else None
