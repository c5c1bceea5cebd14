# Report stage: every run of the grid compared, plotted, and packed with its evidence.
from snakeddp.report import configurations as snakeddp_configurations

# The config the crate records, canonical (sorted keys, no platform: each run's provenance says
# where it ran), so the same config on another profile does not rerun the report.
# Credentials in it (a tracking URI's user:password@) are masked: a rule's params are stored in
# .snakemake/metadata and printed when they change.
CRATE_CONFIG = json.dumps(
    snakeddp_redact.scrub(
        {key: value for key, value in CONFIG.items() if key != "platform"}
    ),
    sort_keys=True,
)
FIGURE_FORMAT = REPORT["figure_format"]
# The swept keys, seed aside, that take several numbers: the monitored metric is plotted against each.
TUNED = snakeddp_configurations.numeric_keys([run["point"] for run in RUNS.values()])


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
        TRAIN_CONDA_ENV
    message:
        "run {wildcards.run}: export the best model"
    shell:
        "python -m snakeddp.cli --results results export {wildcards.run:q}"
        " --to results/export/{wildcards.run:q} > {log:q} 2>&1"


# One job, one process for the whole report: the runs table (one row per run: sweep parameters,
# metrics, epochs, duration, throughput), the configurations table (runs that differ only in seed:
# mean and spread), every configuration's per-epoch curves, the monitored metric against each
# numeric swept key, the throughput and scaling efficiency vs world size (when the runs differ in
# world size), the self-contained page, and the Workflow Run RO-Crate (workflow, config, data manifests, each run's
# inputs and outputs). Its parts take well under a second; separate jobs each paid for starting
# Python and importing pandas or matplotlib, which was most of the report's time.
rule report:
    input:
        provenance=lambda wc: expand(
            rules.train.output.provenance, run=get_report_runs()
        ),
        workflow=WORKFLOW_FILES,
        exports=lambda wc: (
            expand(rules.export.output.description, run=get_report_runs())
            if EXPORT
            else []
        ),
        # A search's decisions, rung by rung (search:); none without a search.
        search=(
            [f"results/search/rung-{rung}.json" for rung in SEARCH.rungs]
            if SEARCH
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
        scaling=(
            report(
                f"results/report/plots/scaling.{FIGURE_FORMAT}",
                caption="../captions/scaling.rst",
                category="Figures",
            )
            if SCALING
            else []
        ),
        scaling_series="results/report/plots/scaling.json" if SCALING else [],
        tuning=(
            report(
                f"results/report/plots/hyperparameters.{FIGURE_FORMAT}",
                caption="../captions/hyperparameters.rst",
                category="Figures",
            )
            if TUNED
            else []
        ),
        tuning_series="results/report/plots/hyperparameters.json" if TUNED else [],
        html=report(
            "results/report/report.html",
            caption="../captions/report.rst",
            category="Report",
        ),
        crate="results/report/ro-crate-metadata.json",
        search_table="results/report/search.csv" if SEARCH else [],
        files=directory("results/report/files"),
    log:
        "logs/report/report.log",
    conda:
        "../envs/report.yaml"
    params:
        report=get_report_json,
        files=get_report_files,
    message:
        "report: runs table, figures, HTML page and RO-Crate"
    shell:
        "python -m snakeddp.steps report --params {params.report:q} --files {params.files:q}"
        " > {log:q} 2>&1"
