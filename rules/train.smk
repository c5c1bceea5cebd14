# Training stage: one run directory per sweep point.
from snakeddp.workflow import plan as snakeddp_plan


# The resolved config of one run; rewritten only when that run's config changes, and never while
# the run trains: update() keeps Snakemake from deleting it before the job, which the step refuses.
rule run_config:
    output:
        run=update(snakeddp_plan.RUN_FILE),
    log:
        "logs/train/{run}.config.log",
    localrule: True
    conda:
        PLAN.train_conda_env
    params:
        run=PLAN.run_json,
    message:
        "run {wildcards.run}: write run.yaml"
    shell:
        "python -m snakeddp.steps run-config --run-id {wildcards.run:q} --run {params.run:q}"
        " --out {output.run:q} > {log:q} 2>&1"


# Train one run with the profile's launcher; provenance.json appears only when it completes.
rule train:
    input:
        run=rules.run_config.output.run,
        manifest=PLAN.manifest,
        environment="results/envs/train.json",
    output:
        provenance=snakeddp_plan.PROVENANCE,
    log:
        "logs/train/{run}.log",
    conda:
        PLAN.train_conda_env
    threads: PLAN.train_threads
    resources:
        **PLAN.train_resources(),
    message:
        "run {wildcards.run}: train (log: logs/train/{wildcards.run}.log)"
    shell:
        "python -m snakeddp.launch --config {input.run:q}"
        " --run-dir results/runs/{wildcards.run:q} --data {input.manifest:q}"
        " --environment-record {input.environment:q} > {log:q} 2>&1"
