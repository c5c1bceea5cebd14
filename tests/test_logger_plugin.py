"""snakeddp's logger plugin, set up as Snakemake sets up `logger: [snakeddp]`: Snakemake's own lines
per job, less the scheduler's chatter and, after a stop (Ctrl-C, SIGTERM, SIGHUP), the records of the jobs it
stopped."""

from __future__ import annotations

import logging
import os
import signal
from types import SimpleNamespace

import pytest
from snakemake_interface_logger_plugins.common import LogEvent
from snakemake_interface_logger_plugins.tests import TestLogHandlerBase

from snakemake_logger_plugin_snakeddp import LogHandler
from tests.helpers import REPO


class TestTheInterface(TestLogHandlerBase):
    """The interface package's own checks of a logger plugin."""

    __test__ = True

    def get_log_handler_cls(self) -> type[LogHandler]:
        return LogHandler

    def get_log_handler_settings(self) -> None:
        return None


def one_job(logger: logging.Logger) -> None:
    """What Snakemake's scheduler logs around one job that runs and finishes (9.27.1)."""
    logger.info("Select jobs to execute...")
    logger.info("Execute 1 jobs...", extra={"event": LogEvent.JOB_STARTED, "jobs": [3]})
    job = {"event": LogEvent.JOB_INFO, "jobid": 3, "rule_msg": "run a: train", "reason": "Missing output files"}
    logger.info(" Rule: train, Jobid: 3", extra=job)
    logger.info("Finished jobid: 3 (Rule: train)", extra={"event": LogEvent.JOB_FINISHED, "job_id": 3})
    logger.info(None, extra={"event": LogEvent.PROGRESS, "done": 1, "total": 1})


# The job as Snakemake's terminal words it, after a blank line.
JOB = ["", "Job 3: run a: train", "Reason: Missing output files"]


def terminal(capsys: pytest.CaptureFixture[str], log, **settings) -> list[str]:
    """The lines ``log(logger)`` puts on the terminal through Snakemake's own set-up of the plugin."""
    from snakemake.logging import LoggerManager
    from snakemake.settings.types import OutputSettings
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

    # What Snakemake's command line hands over for a plugin without settings of its own.
    plugin_settings = LoggerPluginRegistry().get_plugin("snakeddp").get_settings(SimpleNamespace())
    logger = logging.getLogger("snakeddp-terminal-test")
    logger.propagate = False
    output = OutputSettings(log_handler_settings={"snakeddp": plugin_settings}, nocolor=True, **settings)
    manager = LoggerManager(logger, output)
    try:
        log(logger)
    finally:
        manager.stop()
    return capsys.readouterr().err.splitlines()


def test_snakemake_finds_the_plugin_by_its_package_name():
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

    assert LoggerPluginRegistry().get_plugin("snakeddp").log_handler is LogHandler


def test_each_job_shows_what_it_does_and_why_and_the_progress_without_the_scheduler_chatter(capsys):
    assert terminal(capsys, one_job) == [*JOB, "1 of 1 steps (100%) done"]


def test_verbose_shows_the_scheduler_too(capsys):
    lines = terminal(capsys, one_job, verbose=True)
    assert "Select jobs to execute..." in lines and "Execute 1 jobs..." in lines
    assert "Finished jobid: 3 (Rule: train)" in lines
    assert lines[lines.index("Job 3: run a: train") - 1].startswith("[")  # the time line above the job


def test_snakemakes_own_filter_still_applies(capsys):
    from snakemake.settings.enums import Quietness

    assert terminal(capsys, one_job, quiet={Quietness.PROGRESS}) == JOB


def failed(logger: logging.Logger) -> None:
    """What Snakemake 9 logs as a job fails while SIGTERM stops it (its scheduler's line, once per job that ends)."""
    logger.info("Will exit after finishing currently running jobs (scheduler).")
    logger.info(REMOVING)
    logger.error("RuleException in rule train", extra={"event": LogEvent.ERROR, "exception": "RuleException"})


# What Snakemake 9 says as it removes the outputs of a job that did not finish (a stopped ingestion's).
REMOVING = "Removing output files of failed job data_table since they might be corrupted:\nresults/data/t-1/train"


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_errors_show_unless_a_stop_ended_the_jobs(capsys, stop):
    """After Ctrl-C, or SIGTERM or SIGHUP to Snakemake (which its jobs are stopped by too), the jobs' failures are
    left out, and so are the scheduler's word that it waits for them to finish (they stop) and the removal of what
    a stopped job had begun (a rerun makes it again), unless --verbose."""
    from snakeddp.workflow.interrupt import STOPS

    finishing = "Will exit after finishing currently running jobs (scheduler)."
    assert terminal(capsys, failed) == [finishing, *REMOVING.splitlines(), "RuleException in rule train"]
    STOPS.append(stop)
    try:
        assert terminal(capsys, failed) == []
        assert terminal(capsys, failed, verbose=True) == [finishing, *REMOVING.splitlines()]
    finally:
        STOPS.clear()


def failed_job(
    log_file: str,
    shellcmd: str = "python -m snakeddp.launch --config run.yaml > log 2>&1",
    wrote_log: bool = True,
    inputs: tuple[str, ...] = ("run.yaml",),
):
    def log(logger: logging.Logger) -> None:
        """What Snakemake 9 logs for a job whose command failed (and, with ``wrote_log``, wrote its log during the
        invocation): its exception, then the job's record."""
        if wrote_log:
            os.utime(log_file)
        failed_command = (
            'RuleException:\nCalledProcessError in file "/c/rules/train.smk", line 44:\n'
            f"Command 'set -euo pipefail; trap : HUP;  {shellcmd}' returned non-zero exit status 1."
        )
        logger.error(failed_command, extra={"event": LogEvent.ERROR, "exception": "RuleException"})
        record = dict(
            rule_name="train", rule_msg=None, jobid=2, input=list(inputs), output=["provenance.json"],
            log=[log_file], conda_env=None, container_img=None, aux={}, indent=False, shellcmd=shellcmd,
            event=LogEvent.JOB_ERROR,
        )  # fmt: skip
        logger.error("Error in rule train, jobid: 2", extra=record)

    return log


def test_a_failed_jobs_log_shows_only_its_one_line_where_it_ends_in_one(capsys, tmp_path):
    """The job's whole log (Lightning's banner, the model's summary, every epoch again) buried the line that said
    what ended it; a log that ends otherwise (a traceback) is shown whole."""
    line = "snakeddp.train: ValueError: sideways, raised at my/model.py:7, in your code. HINT: fix it there and rerun."
    log = tmp_path / "train.log"
    log.write_text(
        "GPU available: False, used: False\n| 0 | net | Sequential | 945 |\nrun a: epoch 1/4\n" + line + "\n\n"
    )
    shown = terminal(capsys, failed_job(str(log)), show_failed_logs=True)
    assert shown[-2:] == [f"Logfile {log}, its last line (the whole log is in the file):", line], shown
    assert not any("GPU available" in said or "epoch 1/4" in said for said in shown), shown
    assert not any("message: None" in said or "CalledProcessError" in said for said in shown), shown
    assert "Error in rule train:" in shown and f"    log: {log} (check log file(s) for error details)" in shown
    # A preempted rank's line, then srun's on the exit code (the whole log of 228 lines was shown on Slurm).
    preempted = "snakeddp: preempted in epoch 164/400; saved checkpoints/last.ckpt. HINT: rerun to resume from it"
    log.write_text(f"run a: epoch 163/400\n{preempted}\nsrun: error: vm-2: task 0: Exited with exit code 75\n")
    shown = terminal(capsys, failed_job(str(log)), show_failed_logs=True)
    assert shown[-1] == preempted and not any("epoch 163/400" in said for said in shown), shown
    log.write_text("Traceback (most recent call last):\n  File 'x.py', line 1\nKeyError: 'a'\n")
    shown = terminal(capsys, failed_job(str(log)), show_failed_logs=True)
    assert shown[-4:-1] == ["Traceback (most recent call last):", "  File 'x.py', line 1", "KeyError: 'a'"], shown
    assert terminal(capsys, failed_job(str(log)), show_failed_logs=True, verbose=True)[0] == "RuleException:"


def test_a_log_older_than_the_invocation_is_not_shown_as_the_failed_jobs(capsys, tmp_path):
    """A train job that sbatch never took (an account the site does not know) left its log as an earlier run had
    written it: the terminal showed that run's every epoch and "completed after 400 epochs" as the failed job's log,
    2,000 lines for two runs and their retries."""
    log = tmp_path / "train.log"
    log.write_text("run a: epoch 1/4\nrun a: epoch 2/4\nsnakeddp: run a completed after 4 epochs\n")
    os.utime(log, (log.stat().st_atime, log.stat().st_mtime - 600))  # written by a run ten minutes ago
    shown = terminal(capsys, failed_job(str(log), wrote_log=False), show_failed_logs=True)
    assert not any("epoch" in said for said in shown), shown
    assert shown[-1] == f"Logfile {log}: not shown, as this job did not write it (it is from an earlier invocation)"
    shown = terminal(capsys, failed_job(str(log)), show_failed_logs=True)  # the job's own: shown whole
    assert shown[-4:-1] == ["run a: epoch 1/4", "run a: epoch 2/4", "snakeddp: run a completed after 4 epochs"]


def snakemakes_error(logger: logging.Logger, raise_it) -> None:
    """What Snakemake's command line logs for an exception raised before the Snakefile is read
    (SnakemakeApi.print_exception: the formatted exception and its class's name)."""
    from snakemake.exceptions import format_exception_to_string

    try:
        raise_it()
    except Exception as error:  # whatever Snakemake raises, as its command line catches it
        logger.error(
            format_exception_to_string(error), extra={"event": LogEvent.ERROR, "exception": type(error).__name__}
        )


def typed_mistake(capsys, monkeypatch, tmp_path, *typed: str) -> list[str]:
    """The terminal's lines for ``snakemake *typed`` where Snakemake's own parsing of --config and
    --configfile (snakemake.cli.parse_config, ConfigSettings) refuses what was typed, in ``tmp_path``."""
    from snakemake.cli import parse_args, parse_config
    from snakemake.settings.types import ConfigSettings

    monkeypatch.chdir(tmp_path)
    argv = ["snakemake", "--workflow-profile", "none", *typed, "-n"]
    monkeypatch.setattr("sys.argv", argv)
    _, args = parse_args(argv[1:])
    settings = lambda: ConfigSettings(config=parse_config(args.config), configfiles=args.configfile)  # noqa: E731
    return terminal(capsys, lambda logger: snakemakes_error(logger, settings))


@pytest.mark.parametrize(
    "typed, expected",
    [
        (
            ["--configfile", "nope.yaml"],
            "snakeddp: --configfile nope.yaml: no such file or directory ({tmp}/nope.yaml). HINT: give a YAML file "
            "that exists, its path from {tmp} or absolute, then run the same command again (config/config.yaml is "
            "read first; the --configfile holds only the keys that differ).",
        ),
        (
            ["--configfile", "mine.yaml", "tabs.yaml"],
            "snakeddp: --configfile tabs.yaml is not valid YAML: line 2, column 1: found character '\\t' that "
            "cannot start any token. HINT: mend line 2 of tabs.yaml (YAML indents with spaces, never tabs; a list "
            "closes with ']', a mapping with '}'), then run the same command again.",
        ),
        (
            ["--configfile=open.yaml"],
            "snakeddp: --configfile open.yaml is not valid YAML: line 2, column 1: expected ',' or ']', but got "
            "'<stream end>' (while parsing a flow sequence from line 1). HINT: mend line 2 of open.yaml (YAML "
            "indents with spaces, never tabs; a list closes with ']', a mapping with '}'), then run the same "
            "command again.",
        ),
        (
            ["--configfile", "list.yaml"],
            "snakeddp: --configfile list.yaml holds a list, not config keys. HINT: write the sections at the top "
            "level of list.yaml, as config/config.yaml does (trainer:, model:, data:, each with its keys), then "
            "run the same command again.",
        ),
        (
            ["--config", "seed=3", "trainer.max_epochs=3"],
            "snakeddp: --config trainer.max_epochs=3: Snakemake takes a section with its keys, not a dotted key. "
            "HINT: type --config 'trainer={max_epochs: 3}' instead (the section's other keys keep their values).",
        ),
        (
            ["--config", "model.kwargs.hidden=[8, 8]", "model.name=a, b"],
            "snakeddp: --config model.kwargs.hidden=[8, 8]: Snakemake takes a section with its keys, not a dotted "
            "key. HINT: type --config 'model={kwargs: {hidden: [8, 8]}}' instead (the section's other keys keep "
            "their values).",
        ),
        (
            ["--config", "model.name=a, b"],
            "snakeddp: --config model.name=a, b: Snakemake takes a section with its keys, not a dotted key. HINT: "
            "type --config 'model={name: \"a, b\"}' instead (the section's other keys keep their values).",
        ),
        (
            ["--config", "trainer"],
            "snakeddp: --config trainer: an entry is KEY=VALUE, a config section and its keys. HINT: type --config "
            "'trainer={KEY: VALUE}' with the keys to change (config/schema.yaml documents each), as --config "
            "'trainer={max_epochs: 3}' does.",
        ),
        (
            ["--config", "1st=3"],
            "snakeddp: --config 1st=3: '1st' is not a config section (a name of letters, digits and _). HINT: type "
            "--config SECTION={KEY: VALUE} with a section of config/schema.yaml, as --config "
            "'trainer={max_epochs: 3}' does.",
        ),
    ],
)
def test_a_mistake_typed_before_the_snakefile_runs_is_one_line_with_a_hint(
    capsys, monkeypatch, tmp_path, typed, expected
):
    """Snakemake refuses these while it parses the command line, in a traceback (a missing file), or in a message
    naming no file or entry; the terminal shows one line naming what was typed, and how to mend it."""
    (tmp_path / "mine.yaml").write_text("seed: 3\n")
    (tmp_path / "tabs.yaml").write_text("trainer:\n\tmax_epochs: 3\n")
    (tmp_path / "open.yaml").write_text("launch: {devices: [1, 2\n")
    (tmp_path / "list.yaml").write_text("- seed: 3\n")
    assert typed_mistake(capsys, monkeypatch, tmp_path, *typed) == [expected.replace("{tmp}", str(tmp_path))]


def test_a_mistake_not_found_on_the_command_line_keeps_snakemakes_words(capsys, monkeypatch, tmp_path):
    """A --configfile given in a profile is not on the command line: Snakemake's message stays as it wrote it."""
    (tmp_path / "tabs.yaml").write_text("trainer:\n\tmax_epochs: 3\n")
    lines = typed_mistake(capsys, monkeypatch, tmp_path, "--configfile", "tabs.yaml")
    assert lines[0].startswith("snakeddp: --configfile tabs.yaml is not valid YAML")
    monkeypatch.setattr("sys.argv", ["snakemake", "-n"])  # what a profile's configfile: leaves on the command line
    from snakemake.settings.types import ConfigSettings

    lines = terminal(capsys, lambda logger: snakemakes_error(logger, lambda: ConfigSettings(configfiles=["tabs.yaml"])))
    assert any("Config file is not valid JSON or YAML" in line for line in lines), lines
    assert not any("HINT" in line for line in lines), lines


def test_a_missing_configfile_a_profile_gives_is_named_as_the_profiles(capsys, monkeypatch, tmp_path):
    from snakemake.settings.types import ConfigSettings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["snakemake", "--profile", "mine", "-n"])
    lines = terminal(capsys, lambda logger: snakemakes_error(logger, lambda: ConfigSettings(configfiles=["gone.yaml"])))
    assert len(lines) == 1 and lines[0].startswith(
        f"snakeddp: the configfile gone.yaml a profile gives: no such file or directory ({tmp_path}/gone.yaml). HINT: "
    ), lines


def test_snakemake_typed_where_no_snakefile_is_names_the_checkout_to_cd_to(capsys, monkeypatch, tmp_path):
    """Snakemake's "No Snakefile found" (before any snakeddp code runs) is one line naming the folder to cd to: the
    checkout above a subdirectory, else the one this plugin is installed from."""
    from snakemake.api import resolve_snakefile

    checkout = tmp_path / "snakeddp"
    (checkout / "config" / "sub").mkdir(parents=True)
    (checkout / "Snakefile").write_text("rule all:\n")
    monkeypatch.setattr("sys.argv", ["snakemake", "--profile", "local"])
    for where in (checkout / "config", checkout / "config" / "sub"):
        monkeypatch.chdir(where)
        lines = terminal(capsys, lambda logger: snakemakes_error(logger, lambda: resolve_snakefile(None)))
        assert lines == [
            f"snakeddp: no Snakefile in {where}, a subdirectory of the checkout {checkout}, which snakemake runs "
            f"from. HINT: cd {checkout} and run the same command there (config/, profiles/ and results/ are "
            "relative to it)."
        ]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    lines = terminal(capsys, lambda logger: snakemakes_error(logger, lambda: resolve_snakefile(None)))
    assert lines == [
        f"snakeddp: no Snakefile in {outside}, which is outside snakeddp's checkout. HINT: cd {REPO} (the "
        "checkout) and run the same command there."
    ]
    monkeypatch.chdir(REPO)
    assert resolve_snakefile(None).is_file(), "the checkout named holds the Snakefile"


def test_a_failed_jobs_inputs_past_the_first_few_are_counted(capsys, tmp_path):
    """A table's ingestion that failed listed every file of the table on its "input:" line (2,000 Parquet parts: one
    line of 60,000 characters above the step's one line)."""
    log = tmp_path / "ingest.log"
    log.write_text("snakeddp.steps: data/t/part-01999.parquet: no column 'c'. HINT: fix data.table.features.\n")
    parts = tuple(f"data/t/part-{i:05d}.parquet" for i in range(2000))
    shown = terminal(capsys, failed_job(str(log), inputs=parts), show_failed_logs=True)
    said = f"    input: {', '.join(parts[:3])}, … and 1,997 more"
    assert said in shown and not any("part-00003" in line for line in shown), shown
    few = terminal(capsys, failed_job(str(log), inputs=parts[:3]), show_failed_logs=True)
    assert f"    input: {', '.join(parts[:3])}" in few
    assert any("part-01999" in line for line in terminal(capsys, failed_job(str(log), inputs=parts), verbose=True))
