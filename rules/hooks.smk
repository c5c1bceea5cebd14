# What the workflow does around its jobs: checks when they start, the warm process and the terminal
# relay of the local platform, the platform's watch, and the last lines at the end.


# Each rule is a step of snakeddp.run.rules, which the report's crate describes the workflow from.
try:
    snakeddp_rules.check_rules(rule.name for rule in workflow.rules)
except snakeddp_config.ConfigError as error:
    snakeddp_preflight.stop(error)

# `snakemake --report` before the report exists says so in one line (snakeddp.compat.snakemake).
if TYPED_INVOCATION:
    snakeddp_snakemake.before_report(stop_unless_report_made)

# Snakemake's imports and the parsed workflow: less work at exit (snakeddp.util.shutdown).
snakeddp_shutdown.freeze_imports()


# A dry run shows the plan, and notes what a real run would stop on that only jobs about to run
# check (a local run's cores, a Slurm run no node of its partition holds) and what auto decides.
if workflow.output_settings.dryrun:
    PLATFORM_CONTRACT.note(
        INVOCATION, get_runs_to_train(), workflow.resource_settings.cores
    )


# Before the first job: what the platform checks then (a local run's cores, credentials, Slurm's
# nodes, which also starts its watch over pending jobs), an MLflow
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
            to_train = get_runs_to_train()
            snakeddp_preflight.check_tracking_server(
                CONFIG["tracking"], to_train, PLATFORM, os.environ
            )
            training = {
                wildcards["run"]
                for rule, wildcards in snakeddp_snakemake.pending_jobs(workflow)
                if rule in INVOCATION.train_rules
            }
            PLATFORM_CONTRACT.before_jobs(
                INVOCATION,
                to_train,
                {run: RUNS[run] for run in RUNS if run in training},
                workflow.cores,
            )
        except snakeddp_config.ConfigError as error:
            snakeddp_preflight.stop(error)
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
    if PLATFORM_ROW.this_machine:
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
                snakeddp_errors.print_line(
                    f"snakeddp: jobs start cold: {why_cold}. {snakeddp_warm.HINT}"
                )


# The last line of a successful run: where to look. The scheduler's pending wake-up timer would
# hold the finished process for up to a second (snakeddp.compat.snakemake). No job is left to
# print a line: the relay writes what they sent and stops, before Snakemake's last lines.
onsuccess:
    PLATFORM_CONTRACT.close(INVOCATION)
    snakeddp_snakemake.release_scheduler_timers()
    WARM_PROCESS.close()
    TERMINAL_RELAY.close()
    if Path(rules.report.output.html).is_file():
        snakeddp_errors.print_line(
            f"Report: {Path(rules.report.output.html).resolve()}", sys.stdout
        )


onerror:
    PLATFORM_CONTRACT.close(INVOCATION)
    snakeddp_snakemake.release_scheduler_timers()
    WARM_PROCESS.close()
    TERMINAL_RELAY.close()
    if snakeddp_interrupt.INTERRUPTED.is_set():
        for line in snakeddp_interrupt.summary(
            (run, Path(rules.train.output.provenance.format(run=run)).parent)
            for run in RUNS
        ):
            snakeddp_errors.print_line(line)
