# Training stage: one run directory per sweep point.


# The resolved config of one run; rewritten only when that run's config changes, and never while
# the run trains: update() keeps Snakemake from deleting it before the job, which the step refuses.
rule run_config:
    message:
        "run {wildcards.run}: write run.yaml"
    output:
        run=update("results/runs/{run}/run.yaml"),
    log:
        "logs/train/{run}.config.log",
    localrule: True
    conda:
        TRAIN_CONDA_ENV
    params:
        run=get_run_json,
    shell:
        "python -m snakeddp.steps run-config --run-id {wildcards.run:q} --run {params.run:q}"
        " --out {output.run:q} > {log:q} 2>&1"


# Train one run with the profile's launcher; provenance.json appears only when it completes.
rule train:
    message:
        "run {wildcards.run}: train (log: logs/train/{wildcards.run}.log)"
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
    shell:
        "python -m snakeddp.launch --config {input.run:q}"
        " --run-dir results/runs/{wildcards.run:q} --data {input.manifest:q}"
        " --environment-record {input.environment:q} > {log:q} 2>&1"


# Cores are checked before the first job runs (the Snakefile's onstart). A dry run notes them for
# the runs not trained yet, whatever cores it was given (Snakemake gives it 1 unless told), and
# which of them auto trains on the CPU for want of GPUs (onstart says it too).
if workflow.output_settings.dryrun:
    snakeddp_preflight.note_cores(
        get_runs_to_train(), PLATFORM, workflow.resource_settings.cores
    )
    snakeddp_preflight.note_accelerators(get_runs_to_train(), PLATFORM)
