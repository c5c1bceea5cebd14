# snakeddp: partitioned data -> distributed Lightning training -> report, on any profile.
#   snakemake --profile local     (this machine, snakeddp's supervisor)
#   snakemake --profile slurm     (Slurm, srun/mpirun inside each job)
#   snakemake --profile azureml   (AzureML jobs)
from snakemake.utils import min_version

min_version("9.0")


# Refuses to run from a subdirectory of the checkout (every path below is relative to its root).
include: "rules/checkout.smk"


# Snakemake's private parts used below, checked against the releases they were written for.
import os
import sys
from pathlib import Path

from snakeddp.errors import ConfigError, UpstreamVersionError

try:
    from snakeddp.compat import snakemake as snakeddp_snakemake
except UpstreamVersionError as error:
    snakeddp_preflight.stop(error)

# The invocation the user typed, not the Snakemake a job runs inside (a remote or subprocess job):
# only it checks the profile, talks to the terminal and refreshes records.
TYPED_INVOCATION = not (workflow.remote_exec or workflow.subprocess_exec)

# A profile's `config:` (its platform, what its nodes have) holds whatever else is typed: Snakemake
# would take it only as the default of --config, so any typed --config dropped it (the jobs it
# spawns get it on theirs). A platform typed against the profile's is refused.
if TYPED_INVOCATION:
    from snakeddp.workflow import profile as snakeddp_profile

    try:
        PROFILE = snakeddp_profile.find(
            sys.argv[1:], os.environ, Path.cwd(), Path(workflow.basedir)
        )
        PROFILE_CONFIG, TYPED_CONFIG = snakeddp_snakemake.keep_profile_config(
            workflow, PROFILE.entries
        )
        snakeddp_profile.check_platform(PROFILE, PROFILE_CONFIG, TYPED_CONFIG)
    except ConfigError as error:
        snakeddp_preflight.stop(error)
else:
    TYPED_CONFIG = {}
# Snakemake announces any command-line config as "Config file ... is extended by additional
# config"; the profile's own settings alone are no news to the user, so they are set aside while
# config/config.yaml loads and put back right after.
PROFILE_ASIDE = snakeddp_snakemake.set_aside_profile_config(workflow, TYPED_CONFIG)


configfile: "config/config.yaml"


snakeddp_snakemake.put_back_profile_config(workflow, config, PROFILE_ASIDE)


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/env.smk"
include: "rules/train.smk"
include: "rules/search.smk"
include: "rules/report.smk"


# Everything a user looks at: the run table, the report page, the RO-Crate of the runs and the
# record of each stage's environment.
rule all:
    message:
        "all: done"
    default_target: True
    input:
        rules.report.output,
        expand(rules.env_capture.output.record, stage=["data", "train", "report"]),


# Each rule is a step of snakeddp.run.rules, which the report's crate describes the workflow from.
try:
    snakeddp_rules.check_rules(rule.name for rule in workflow.rules)
except snakeddp_config.ConfigError as error:
    snakeddp_preflight.stop(error)

# The terminal shows per job what it does and why, not the scheduler's chatter around it, and
# `snakemake --report` before the report exists says so in one line (snakeddp.compat.snakemake).
if TYPED_INVOCATION:
    snakeddp_snakemake.quiet_scheduling(workflow)
    snakeddp_snakemake.before_report(stop_unless_report_made)

# Snakemake's imports and the parsed workflow: less work at exit (snakeddp.util.shutdown).
snakeddp_shutdown.freeze_imports()


# On Slurm: a run no node of its partition could hold is refused before anything is submitted
# (onstart; a dry run notes it), and a submitted job Slurm keeps pending for a reason no wait can
# clear is cancelled with a line saying why, from onstart to the end (snakeddp.workflow.slurm_watch).
if workflow.output_settings.dryrun:
    snakeddp_preflight.note_slurm_nodes(
        get_runs_to_train(),
        PLATFORM,
        CONFIG["site"],
        config.get("site") or {},
        SLURM_NODES,
    )
SLURM_WATCH = snakeddp_slurm_watch.PendingWatch(logger.error)


# Before the first job: a local run gets as many cores as it starts processes, and an MLflow
# server that runs will log to answers (checked here, not while the workflow is read, which
# --report, --summary and --list-rules also do, with 0 or 1 core and no server needed), no job
# would touch a run that trains in another invocation (--nolock), and the log of a training
# attempt that did not finish is moved aside, not overwritten (a live one stays where it is written).
onstart:
    if not workflow.touch:
        try:
            snakeddp_live.check_no_live_runs(
                snakeddp_snakemake.pending_jobs(workflow),
                lambda run: Path(
                    rules.train.output.provenance.format(run=run)
                ).parent,
            )
            snakeddp_preflight.check_cores(RUNS, PLATFORM, workflow.cores)
            to_train = get_runs_to_train()
            snakeddp_preflight.note_accelerators(to_train, PLATFORM)
            snakeddp_preflight.check_tracking_server(
                CONFIG["tracking"], to_train, PLATFORM, os.environ
            )
            snakeddp_preflight.check_databricks_credentials(
                CONFIG, to_train, PLATFORM
            )
            training = {
                wildcards["run"]
                for rule, wildcards in snakeddp_snakemake.pending_jobs(workflow)
                if rule in ("train", "search_train")
            }
            snakeddp_preflight.check_slurm_nodes(
                {run: RUNS[run] for run in RUNS if run in training},
                PLATFORM,
                CONFIG["site"],
                config.get("site") or {},
                SLURM_NODES,
            )
        except snakeddp_config.ConfigError as error:
            snakeddp_preflight.stop(error)
        if PLATFORM == "slurm":
            SLURM_WATCH.start()
        snakeddp_interrupt.keep_unfinished_logs(
            (
                Path(rules.train.log[0].format(run=run)),
                Path(rules.train.output.provenance.format(run=run)),
            )
            for run in RUNS
            if not snakeddp_attempt.is_live(
                Path(rules.train.output.provenance.format(run=run)).parent
            )
        )
    # Every job starts after this: each finds the relay for its progress lines (rules/common.smk),
    # and the warm process that forks it with torch and Lightning imported once (snakeddp.warm).
    if PLATFORM == "local":
        os.environ[snakeddp_terminal.VARIABLE] = TERMINAL_RELAY.start()
        if not workflow.touch:
            try:
                why_cold = snakeddp_warm.why_cold(DEPLOYMENT, os.environ)
            except snakeddp_config.ConfigError as error:
                snakeddp_preflight.stop(error)
            if why_cold is None:
                # It imports what this invocation's jobs import: a data-only run imports no torch.
                os.environ[snakeddp_warm.SOCKET] = WARM_PROCESS.start(
                    preload=snakeddp_warm_preload.for_rules(
                        rule
                        for rule, _ in snakeddp_snakemake.pending_jobs(workflow)
                    )
                )
            elif why_cold:
                print(
                    f"snakeddp: jobs start cold: {why_cold}. {snakeddp_warm.HINT}",
                    file=sys.stderr,
                )


# The last line of a successful run: where to look. The scheduler's pending wake-up timer would
# hold the finished process for up to a second (snakeddp.compat.snakemake). No job is left to
# print a line: the relay writes what they sent and stops, before Snakemake's last lines.
onsuccess:
    SLURM_WATCH.close()
    snakeddp_snakemake.release_scheduler_timers()
    WARM_PROCESS.close()
    TERMINAL_RELAY.close()
    if Path(rules.report.output.html).is_file():
        print(f"Report: {Path(rules.report.output.html).resolve()}", flush=True)


onerror:
    SLURM_WATCH.close()
    snakeddp_snakemake.release_scheduler_timers()
    WARM_PROCESS.close()
    TERMINAL_RELAY.close()
    if snakeddp_interrupt.INTERRUPTED.is_set():
        for line in snakeddp_interrupt.summary(
            (run, Path(rules.train.output.provenance.format(run=run)).parent)
            for run in RUNS
        ):
            print(line, file=sys.stderr, flush=True)
