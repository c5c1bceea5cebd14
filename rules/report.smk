# Report stage: every run of the grid compared, plotted, and packed with its evidence.

# The config the crate records, canonical (sorted keys, no platform: each run's provenance says
# where it ran), so the same config on another profile does not rerun report_crate.
CRATE_CONFIG = json.dumps(
    {key: value for key, value in CONFIG.items() if key != "platform"}, sort_keys=True
)


# One row per run: the sweep parameters, best val_loss and accuracy, epochs, duration, throughput.
rule report_runs:
    message:
        "report: runs table"
    input:
        provenance=expand(rules.train.output.provenance, run=RUNS),
    output:
        table="results/report/runs.csv",
    log:
        "logs/report/runs.log",
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/report_runs.py"


# Every run's per-epoch curves in one figure, and the numbers it plots (JSON).
rule report_curves:
    message:
        "report: training curves"
    input:
        provenance=expand(rules.train.output.provenance, run=RUNS),
    output:
        figure=report(
            f"results/report/plots/curves.{REPORT['figure_format']}",
            caption="../report/curves.rst",
            category="Figures",
        ),
        series="results/report/plots/curves.json",
    log:
        "logs/report/curves.log",
    conda:
        "../envs/report.yaml"
    params:
        report=REPORT,
    script:
        "../scripts/report_figures.py"


# Throughput and scaling efficiency vs world size (when the runs differ in world size).
rule report_scaling:
    message:
        "report: scaling figure"
    input:
        provenance=expand(rules.train.output.provenance, run=RUNS),
    output:
        figure=report(
            f"results/report/plots/scaling.{REPORT['figure_format']}",
            caption="../report/scaling.rst",
            category="Figures",
        ),
        series="results/report/plots/scaling.json",
    log:
        "logs/report/scaling.log",
    conda:
        "../envs/report.yaml"
    params:
        report=REPORT,
    script:
        "../scripts/report_figures.py"


# The self-contained report page: runs table, figures, checkpoints, provenance per run.
rule report_html:
    message:
        "report: HTML page"
    input:
        provenance=expand(rules.train.output.provenance, run=RUNS),
        table=rules.report_runs.output.table,
        curves=rules.report_curves.output.figure,
        scaling=rules.report_scaling.output.figure if SCALING else [],
    output:
        html=report(
            "results/report/report.html",
            caption="../report/report.rst",
            category="Report",
        ),
    log:
        "logs/report/html.log",
    conda:
        "../envs/report.yaml"
    params:
        report=REPORT,
    script:
        "../scripts/report_html.py"


# The Workflow Run RO-Crate: workflow, config, data manifests, and each run's inputs and outputs.
rule report_crate:
    message:
        "report: RO-Crate"
    input:
        provenance=expand(rules.train.output.provenance, run=RUNS),
        report=[
            rules.report_html.output.html,
            rules.report_runs.output.table,
            rules.report_curves.output,
            rules.report_scaling.output if SCALING else [],
        ],
        workflow=WORKFLOW_FILES,
    output:
        crate="results/report/ro-crate-metadata.json",
        files=directory("results/report/files"),
    log:
        "logs/report/crate.log",
    conda:
        "../envs/report.yaml"
    params:
        report=REPORT,
        config=CRATE_CONFIG,
        configfiles=CONFIG_FILES,
    script:
        "../scripts/report_crate.py"
