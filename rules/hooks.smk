# What the workflow does around its jobs: checks when they start, the warm process and the terminal
# relay of the jobs on this machine, the platform's watch, and the last lines at the end.
import os
import sys
import uuid
from pathlib import Path

from snakemake.logging import logger

from snakeddp import errors as snakeddp_errors
from snakeddp.compat import snakemake as snakeddp_snakemake
from snakeddp.config import ConfigError
from snakeddp.run import attempt as snakeddp_attempt
from snakeddp.run import rules as snakeddp_rules
from snakeddp.run import variables as snakeddp_variables
from snakeddp.util import shutdown as snakeddp_shutdown
from snakeddp.util import terminal as snakeddp_terminal
from snakeddp.warm import preload as snakeddp_warm_preload
from snakeddp.warm import process as snakeddp_warm
from snakeddp.warm import kept as snakeddp_warm_kept
from snakeddp.workflow import interrupt as snakeddp_interrupt
from snakeddp.workflow import live as snakeddp_live
from snakeddp.workflow import preflight as snakeddp_preflight

# Jobs that Snakemake runs on its own machine (every profile's but Slurm's, whose jobs are sbatch's) run
# beside it: their progress lines (epochs, ingestion, the report, and a Spark run's ranks' lines, which its
# driver job receives) also reach its terminal, which otherwise shows a job's output only in the job's log.
# They go through this relay, which writes them with Snakemake's logger, the one writer of its
# output (snakeddp.util.terminal). It listens from onstart (jobs will run) to onsuccess/onerror.
TERMINAL_RELAY = snakeddp_terminal.Relay(logger.info)
# Local jobs are forked from one warm process per invocation (snakeddp.warm), from onstart to the end.
WARM_PROCESS = snakeddp_warm.WarmProcess()


# Each job's shell waits for its command when a closed terminal hangs up the process group: the train job's
# launcher saves and records the try before Snakemake sees the job end (snakeddp.workflow.interrupt).
shell.prefix(snakeddp_interrupt.JOB_SHELL_PREFIX)


# Each rule is a step of snakeddp.run.rules, which the report's crate describes the workflow from.
try:
    snakeddp_rules.check_rules(rule.name for rule in workflow.rules)
except ConfigError as error:
    snakeddp_preflight.stop(error)

# Snakemake's imports and the parsed workflow: less work at exit (snakeddp.util.shutdown).
snakeddp_shutdown.freeze_imports()


# A dry run shows the plan, and notes what a real run would stop on that only jobs about to run
# check (a local run's cores, a Slurm run no node of its partition holds) and what auto decides.
if workflow.output_settings.dryrun:
    PLAN.contract.note(
        PLAN.invocation, PLAN.runs_to_train(), workflow.resource_settings.cores
    )


# Before the first job: what the platform checks then (a local run's cores, credentials, Slurm's
# nodes, which also starts its watch over pending jobs), an MLflow
# server that runs will log to answers (checked here, not while the workflow is read, which
# --report, --summary and --list-rules also do, with 0 or 1 core and no server needed), no job
# would touch a run that trains in another invocation (--nolock), and the log of a training
# attempt that did not finish is moved aside, not overwritten (a live one stays where it is written).
onstart:
    # SIGINT or SIGTERM sent to Snakemake alone reaches its jobs too, as a terminal's Ctrl-C does.
    snakeddp_interrupt.pass_on_to_jobs()
    # This invocation's id, in every job: a table's ingestion that fails names it, and a run of this invocation
    # training beside it stops at once (snakeddp.data.stream).
    os.environ[snakeddp_variables.INVOCATION] = uuid.uuid4().hex
    if not workflow.touch:
        try:
            snakeddp_live.check_no_live_runs(
                snakeddp_snakemake.pending_jobs(workflow), PLAN.run_dir
            )
            to_train = PLAN.runs_to_train()
            snakeddp_preflight.check_tracking_server(
                PLAN.tracking, to_train, PLAN.row.name, os.environ
            )
            pending = list(snakeddp_snakemake.pending_jobs(workflow))
            PLAN.invocation.pending = frozenset(rule for rule, _ in pending)
            training = {
                wildcards["run"]
                for rule, wildcards in pending
                if rule in PLAN.invocation.train_rules
            }
            PLAN.contract.before_jobs(
                PLAN.invocation,
                to_train,
                {run: PLAN.runs[run] for run in PLAN.runs if run in training},
                workflow.cores,
            )
        except ConfigError as error:
            snakeddp_preflight.stop(error)
        snakeddp_interrupt.keep_unfinished_logs(
            (
                Path(rules.train.log[0].format(run=run)),
                Path(rules.train.output.provenance.format(run=run)),
            )
            for run in PLAN.runs
            if not snakeddp_attempt.is_live(PLAN.run_dir(run))
        )
    # Every job starts after this: each finds the relay for its progress lines (rules/common.smk),
    # and the warm process that forks it with torch and Lightning imported once (snakeddp.warm): this
    # invocation's own, or the one `snakeddp warm` keeps where the environment names it (snakeddp.warm.kept).
    # Jobs on other machines never get one's socket (Slurm passes Snakemake's environment on).
    if workflow.local_exec:
        os.environ[snakeddp_terminal.VARIABLE] = TERMINAL_RELAY.start()
    if not PLAN.row.this_machine:
        os.environ.pop(snakeddp_warm.SOCKET, None)
    elif not workflow.touch:
        try:
            why_cold = snakeddp_warm.why_cold(PLAN.deployment, os.environ)
        except ConfigError as error:
            snakeddp_preflight.stop(error)
        if why_cold is not None:
            # Nor a kept one's: these jobs start cold.
            os.environ.pop(snakeddp_warm.SOCKET, None)
            if why_cold:
                snakeddp_errors.print_line(
                    f"snakeddp: jobs start cold: {why_cold}. {snakeddp_warm.HINT}"
                )
        elif not snakeddp_warm_kept.named(os.environ):
            # It imports what this invocation's jobs import: a data-only run imports no torch.
            os.environ[snakeddp_warm.SOCKET] = WARM_PROCESS.start(
                preload=snakeddp_warm_preload.for_rules(
                    rule for rule, _ in snakeddp_snakemake.pending_jobs(workflow)
                )
            )


# The last line of a successful run: where to look. The scheduler's pending wake-up timer would
# hold the finished process for up to a second (snakeddp.compat.snakemake). No job is left to
# print a line: the relay writes what they sent and stops, before Snakemake's last lines.
onsuccess:
    PLAN.contract.close(PLAN.invocation)
    snakeddp_snakemake.release_scheduler_timers()
    WARM_PROCESS.close()
    TERMINAL_RELAY.close()
    if Path(rules.report.output.html).is_file():
        snakeddp_errors.print_line(
            f"Report: {Path(rules.report.output.html).resolve()}", sys.stdout
        )


onerror:
    PLAN.contract.close(PLAN.invocation)
    snakeddp_snakemake.release_scheduler_timers()
    WARM_PROCESS.close()
    TERMINAL_RELAY.close()
    # A stop (Ctrl-C, SIGTERM, SIGHUP) ended the jobs: what each run kept, in place of their failures.
    if snakeddp_interrupt.stopped_by() is not None:
        for line in snakeddp_interrupt.summary(
            ((run, PLAN.run_dir(run)) for run in PLAN.runs),
            snakeddp_interrupt.stopped_by(),
        ):
            snakeddp_errors.print_line(line)
