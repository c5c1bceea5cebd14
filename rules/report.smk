# Report stage: every run of the grid, compared.


# One row per run: the sweep parameters, best val_loss and accuracy, epochs, duration, throughput.
rule report_runs:
    input:
        provenance=expand(rules.train.output.provenance, run=RUNS),
    output:
        table="results/report/runs.csv",
    log:
        "logs/report/runs.log",
    localrule: True
    conda:
        "../envs/report.yaml"
    script:
        "../scripts/report_runs.py"
