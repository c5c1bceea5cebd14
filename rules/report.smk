# Report stage: every run of the grid compared, plotted, and packed with its evidence.
from pathlib import Path

from snakeddp.compat import snakemake as snakeddp_snakemake
from snakeddp.workflow import preflight as snakeddp_preflight

FIGURE_FORMAT = PLAN.report["figure_format"]

# `snakemake --report` before the report job ran: one line saying to run the workflow first
# (snakeddp.compat.snakemake).
if PLAN.typed:
    snakeddp_snakemake.before_report(
        lambda: snakeddp_preflight.stop_unless_report_made(
            Path(rules.report.output.html)
        )
    )


# One run's best checkpoint as model.safetensors + model.json (snakeddp export), when report.export is on.
rule export:
    input:
        provenance=rules.train.output.provenance,
    output:
        description="results/export/{run}/model.json",
        weights="results/export/{run}/model.safetensors",
    log:
        "logs/export/{run}.log",
    conda:
        PLAN.train_conda_env
    message:
        "run {wildcards.run}: export the best model"
    shell:
        "python -m snakeddp.cli --results results export {wildcards.run:q}"
        " --to results/export/{wildcards.run:q} > {log:q} 2>&1"


# One job, one process for the whole report: the runs table (one row per run: sweep parameters,
# metrics, epochs, duration, throughput), the configurations table (runs that differ only in seed:
# mean and spread), every configuration's per-epoch curves, the monitored metric against each
# numeric swept key, the throughput and scaling efficiency vs world size (when the runs differ in
# world size), where each run's wall time went (its account), the self-contained page, and the Workflow Run RO-Crate (workflow, config, data manifests, each run's
# inputs and outputs). Its parts take well under a second; separate jobs each paid for starting
# Python and importing pandas or matplotlib, which was most of the report's time.
rule report:
    input:
        provenance=lambda wc: expand(
            rules.train.output.provenance, run=PLAN.report_runs(checkpoints)
        ),
        workflow=PLAN.workflow_files,
        # The manifests of runs that started beside their ingestion (snakeddp.data.stream): read, and not yet made.
        manifests=lambda wc: PLAN.streamed_manifests(checkpoints),
        exports=lambda wc: (
            expand(rules.export.output.description, run=PLAN.report_runs(checkpoints))
            if PLAN.export
            else []
        ),
        # A search's decisions, rung by rung (search:); none without a search.
        search=(
            [f"results/search/rung-{rung}.json" for rung in PLAN.search.rungs]
            if PLAN.search
            else []
        ),
    output:
        table="results/report/runs.csv",
        configurations="results/report/configurations.csv",
        curves=report(
            f"results/report/plots/curves.{FIGURE_FORMAT}",
            caption="../captions/curves.rst",
            category="Figures",
        ),
        curves_series="results/report/plots/curves.json",
        account=report(
            f"results/report/plots/account.{FIGURE_FORMAT}",
            caption="../captions/account.rst",
            category="Figures",
        ),
        account_series="results/report/plots/account.json",
        scaling=(
            report(
                f"results/report/plots/scaling.{FIGURE_FORMAT}",
                caption="../captions/scaling.rst",
                category="Figures",
            )
            if PLAN.scaling
            else []
        ),
        scaling_series="results/report/plots/scaling.json" if PLAN.scaling else [],
        tuning=(
            report(
                f"results/report/plots/hyperparameters.{FIGURE_FORMAT}",
                caption="../captions/hyperparameters.rst",
                category="Figures",
            )
            if PLAN.tuned
            else []
        ),
        tuning_series="results/report/plots/hyperparameters.json" if PLAN.tuned else [],
        html=report(
            "results/report/report.html",
            caption="../captions/report.rst",
            category="Report",
        ),
        crate="results/report/ro-crate-metadata.json",
        search_table="results/report/search.csv" if PLAN.search else [],
        files=directory("results/report/files"),
    log:
        "logs/report/report.log",
    conda:
        "../envs/report.yaml"
    params:
        report=PLAN.report_json,
        files=PLAN.report_files,
    message:
        "report: runs table, figures, HTML page and RO-Crate"
    shell:
        "python -m snakeddp.steps report --params {params.report:q} --files {params.files:q}"
        " > {log:q} 2>&1"
