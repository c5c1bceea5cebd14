# Training stage: one run directory per sweep point.


# The resolved config of one run; rewritten only when that run's config changes, and never while
# the run trains: update() keeps Snakemake from deleting it before the job, which the step refuses.
rule run_config:
    output:
        run=update("results/runs/{run}/run.yaml"),
    log:
        "logs/train/{run}.config.log",
    localrule: True
    conda:
        TRAIN_CONDA_ENV
    params:
        run=get_run_json,
    message:
        "run {wildcards.run}: write run.yaml"
    shell:
        "python -m snakeddp.steps run-config --run-id {wildcards.run:q} --run {params.run:q}"
        " --out {output.run:q} > {log:q} 2>&1"


# Train one run with the profile's launcher; provenance.json appears only when it completes.
rule train:
    input:
        run=rules.run_config.output.run,
        manifest=get_manifest,
        environment="results/envs/train.json",
    output:
        provenance="results/runs/{run}/provenance.json",
    log:
        "logs/train/{run}.log",
    conda:
        TRAIN_CONDA_ENV
    threads: get_train_threads
    resources:
        **TRAIN_RESOURCES,
    message:
        "run {wildcards.run}: train (log: logs/train/{wildcards.run}.log)"
    shell:
        "python -m snakeddp.launch --config {input.run:q}"
        " --run-dir results/runs/{wildcards.run:q} --data {input.manifest:q}"
        " --environment-record {input.environment:q} > {log:q} 2>&1"
