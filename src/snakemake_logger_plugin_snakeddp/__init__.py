"""snakeddp's terminal, as a Snakemake logger plugin: per job what it does and why, not the scheduler's chatter.

The workflow profile (profiles/default/config.yaml, ``logger: [snakeddp]``) selects it for every
run typed in the checkout, and each named profile (profiles/local, ...) too: Snakemake reads the
workflow profile only where it finds the Snakefile, so typed in a subdirectory only they select it.
Snakemake finds logger plugins by module name on ``sys.path`` (``snakemake_logger_plugin_<name>``),
so it is found where snakeddp is installed (tools/setup.sh installs the checkout's ``src``) or on
``PYTHONPATH``. Jobs that Snakemake spawns read no profile
and keep Snakemake's own handler.

It takes the place of Snakemake's terminal handler (``writes_to_stream``) and keeps Snakemake's own
filter (``--quiet``, ``--printshellcmds``) and formatter, which Snakemake attaches to it because it
brings neither (``has_filter``, ``has_formatter``). On top of them it leaves off the terminal:

- the scheduler's chatter around each job ("Select jobs to execute...", "Execute N jobs...",
  "Finished jobid: ...", the time line above each job), about 6 of 9 lines per job, unless
  ``--verbose``;
- after a stop (Ctrl-C; SIGTERM or SIGHUP to Snakemake, which passes it on to its jobs), Snakemake's
  records of the jobs it stopped (the exception, "Error in rule" with the job's whole log, the final
  WorkflowError): they were stopped, not broken, and the workflow says what each run kept instead
  (snakeddp.workflow.interrupt); and, unless ``--verbose``, its "Removing output files of failed job" (a stopped
  data or report job's, which is right to remove them: a rerun makes them again) and, after SIGTERM or SIGHUP, its
  "Will exit after finishing currently running jobs" (once per job that ends): the jobs do not finish, they stop;
- of a failed job's log (the profiles' show-failed-logs), everything but its last line where that is
  snakeddp's one line with a HINT: what ended the job, which the rest (Lightning's banner, the model's
  summary, every epoch's line again) buried. A log ending otherwise (a traceback) is shown whole;
- a failed job's log that is older than the invocation, in one line: the job's command never wrote it
  (sbatch refused the job: an account or QOS the site does not know), and what it holds is an earlier
  run's (every epoch of a run that completed);
- Snakemake's traceback or fileless message for a mistake typed on the command line and met before the Snakefile
  runs (a --configfile missing or not YAML, a dotted --config key), and its "No Snakefile found" typed in a
  subdirectory of the checkout: one line with a HINT instead (``typed``);
- of a failed job's "input:" line, every file past the first few (a table's ingestion lists each of the table's
  files: thousands for a folder of Parquet parts), said as how many more;
- the "RuleException: CalledProcessError ... returned non-zero exit status N" above a failed job's record,
  whose command its "Error in rule" block repeats, unless ``--verbose``.

The complete log (.snakemake/log) keeps every line. The wordings matched below are Snakemake's
messages, not its interface: if a release rewords one, that line shows again, nothing breaks.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent

from snakemake_logger_plugin_snakeddp import typed

# The line Snakemake's formatter puts above a job: time.asctime() in brackets.
_JOB_TIME = re.compile(r"^(\s*)\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]\n")
_SCHEDULING = "Select jobs to execute..."
# What Snakemake's scheduler says on SIGTERM, each time a job ends until none runs.
_FINISHING = "Will exit after finishing currently running jobs (scheduler)."
# What Snakemake says as it removes the outputs of a job that did not finish (Job.cleanup), a stopped job's too.
_REMOVING = "Removing output files of failed job "
_CHATTER = {LogEvent.JOB_STARTED, LogEvent.JOB_FINISHED}
_ERRORS = {LogEvent.ERROR, LogEvent.JOB_ERROR, LogEvent.GROUP_ERROR}
# Snakemake's terminal colours (ANSI codes), so a terminal looks as it did without the plugin.
_COLOURS = {"WARNING": 33, "INFO": 32, "DEBUG": 34, "CRITICAL": 35, "ERROR": 31}
_YELLOW_INFO = {LogEvent.RUN_INFO, LogEvent.SHELLCMD, LogEvent.JOB_STARTED, None}
# snakeddp's one line that ends a job: its program's name, and what to do (snakeddp.errors.one_line).
_ONE_LINE = re.compile(r"^snakeddp[\w.]*: .*HINT: ")
# What a launcher writes after its task's own last line: srun's and mpirun's word on the exit code.
_LAUNCHER_AFTER = re.compile(r"^(srun|slurmstepd|mpirun|prterun)(: |-)")
# Snakemake's exception for a job's shell command that failed, logged before the job's own record.
_COMMAND_FAILED = re.compile(
    r"^RuleException:\nCalledProcessError in file .*returned non-zero exit status -?\d+\.?$", re.S
)


def stopped() -> bool:
    """Whether a stop (Ctrl-C, SIGTERM, SIGHUP) ended the workflow's jobs, as the Snakefile noted it. Looked
    up, not imported: importing snakeddp here, before the Snakefile puts its checkout's src first on
    sys.path, could load another copy of it."""
    interrupt = sys.modules.get("snakeddp.workflow.interrupt")
    return interrupt is not None and interrupt.stopped_by() is not None


def failed_logs_told(text: str, logs: list[str], since: float = 0.0) -> str:
    """A failed job's record with each of its logs (as Snakemake's show_logs puts them in) cut to the log's last
    line where that is snakeddp's one line (srun's or mpirun's word on the exit code after it aside), and to one
    line where it was last written before ``since`` (the invocation's start: the job never wrote it); Snakemake's
    "message: None" (a rule without a message) left off."""
    from snakemake.logging import show_logs

    text = text.replace("\n    message: None\n", "\n")
    for log in logs:
        shown = "\n".join(show_logs([log]))
        try:
            written = os.stat(log).st_mtime
            with open(log, encoding="utf-8", errors="replace") as handle:
                lines = [line for line in handle.read().splitlines() if line.strip()]
        except OSError:
            continue
        if written < since and shown in text:
            told = f"Logfile {log}: not shown, as this job did not write it (it is from an earlier invocation)"
            text = text.replace(shown, told)
            continue
        while lines and _LAUNCHER_AFTER.match(lines[-1]):  # srun's "task 0: Exited with exit code 75" after ours
            lines.pop()
        if lines and _ONE_LINE.match(lines[-1]) and shown in text:
            text = text.replace(shown, f"Logfile {log}, its last line (the whole log is in the file):\n{lines[-1]}")
    return text


# A failed job's inputs shown by name (the rest counted): its command's and log's lines are what say why it failed.
SHOWN_INPUTS = 3


def inputs_told(text: str, inputs: list[str]) -> str:
    """A failed job's record with its "input:" line cut to the first SHOWN_INPUTS files and how many more."""
    if len(inputs) <= SHOWN_INPUTS:
        return text
    whole = f"\n    input: {', '.join(inputs)}\n"
    shown = ", ".join(inputs[:SHOWN_INPUTS])
    return text.replace(whole, f"\n    input: {shown}, … and {len(inputs) - SHOWN_INPUTS:,} more\n", 1)


class LogHandler(LogHandlerBase):
    """Snakemake's terminal less the chatter and the stopped jobs' errors."""

    def __post_init__(self) -> None:
        self.stream = sys.stdout if self.common_settings.stdout else sys.stderr
        # As Snakemake's own handler: colours only on a terminal that shows them.
        isatty = getattr(self.stream, "isatty", None)
        tty = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
        self.colour = tty and not self.common_settings.nocolor
        self.last_was_job_info = False
        # A failed job's log last written before this was not written by the job. Less 2 s: a file's mtime is the
        # kernel's coarse clock (a tick behind time.time()), or a shared file system server's.
        self.started = time.time() - 2.0
        self.addFilter(self.shown)

    def shown(self, record: logging.LogRecord) -> bool:
        event = getattr(record, "event", None)
        if not self.common_settings.verbose and _COMMAND_FAILED.match(str(record.getMessage()).strip()):
            return False
        if event in _ERRORS:
            return not stopped()
        if self.common_settings.verbose:
            return True
        message = record.getMessage()
        stops_account = message == _FINISHING or str(message).startswith(_REMOVING)
        return event not in _CHATTER and message != _SCHEDULING and not (stops_account and stopped())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = getattr(record, "event", None)
            # As Snakemake's own handler: a blank line above the first of consecutive jobs.
            if event == LogEvent.JOB_INFO and not self.last_was_job_info:
                self.stream.write("\n")
            self.last_was_job_info = event == LogEvent.JOB_INFO
            text = self.format(record)
            if event == LogEvent.ERROR:
                text = typed.told(record.getMessage(), getattr(record, "exception", None), sys.argv) or text
            if not self.common_settings.verbose:
                text = _JOB_TIME.sub(r"\1", text, count=1)
                if event == LogEvent.JOB_ERROR:
                    text = failed_logs_told(text, getattr(record, "log", None) or [], self.started)
                    text = inputs_told(text, list(getattr(record, "input", None) or []))
            if text in ("", "None"):
                return
            self.stream.write(self.coloured(record, text) + "\n")
            self.stream.flush()
        except Exception:
            self.handleError(record)

    def coloured(self, record: logging.LogRecord, text: str) -> str:
        if not self.colour or record.levelname not in _COLOURS:
            return text
        yellow = record.levelno == logging.INFO and getattr(record, "event", None) in _YELLOW_INFO
        return f"\033[{_COLOURS['WARNING' if yellow else record.levelname]}m{text}\033[0m"

    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return False

    @property
    def has_formatter(self) -> bool:
        return False

    @property
    def needs_rulegraph(self) -> bool:
        return False
