# Search stage (search: in the config): successive halving over the sweep's configurations.
# Rung k trains its configurations' runs to PLAN.search.budgets[k] epochs (search_train, continuing
# from the previous rung's checkpoint), and the checkpoint rule search_rung ranks them and names
# the configurations rung k+1 trains: the DAG grows rung by rung, and stays one workflow.


from snakeddp.workflow import plan as snakeddp_plan


# A run's config at one rung's budget: run.yaml with trainer.max_epochs set to the rung's epochs
# (update(): left in place, and refused, while the run trains, as run_config's).
rule search_run_config:
    output:
        run=update("results/search/{run}/epochs-{epochs}.yaml"),
    log:
        "logs/search/{run}.epochs-{epochs}.config.log",
    localrule: True
    conda:
        PLAN.train_conda_env
    params:
        run=PLAN.run_json,
    message:
        "run {wildcards.run}: write its config for {wildcards.epochs} epochs"
    shell:
        "python -m snakeddp.steps rung-config --run-id {wildcards.run:q} --run {params.run:q}"
        " --epochs {wildcards.epochs:q} --out {output.run:q} > {log:q} 2>&1"


# Train one run to a rung's budget, in its own run directory; its record goes beside the config.
rule search_train:
    input:
        run=rules.search_run_config.output.run,
        manifest=PLAN.manifest,
        environment="results/envs/train.json",
    output:
        record=snakeddp_plan.RUNG_RECORD,
    log:
        "logs/search/{run}.epochs-{epochs}.log",
    conda:
        PLAN.train_conda_env
    threads: PLAN.train_threads
    resources:
        **PLAN.train_resources(),
    message:
        "run {wildcards.run}: train to epoch {wildcards.epochs} (log: logs/search/{wildcards.run}.epochs-{wildcards.epochs}.log)"
    shell:
        "python -m snakeddp.launch --config {input.run:q}"
        " --run-dir results/runs/{wildcards.run:q} --data {input.manifest:q}"
        " --environment-record {input.environment:q} --record-to {output.record:q} > {log:q} 2>&1"


# Rank one rung's configurations and name those the next rung trains.
checkpoint search_rung:
    input:
        records=lambda wc: PLAN.rung_records(wc, checkpoints),
    output:
        decision="results/search/rung-{rung}.json",
    log:
        "logs/search/rung-{rung}.log",
    localrule: True
    conda:
        PLAN.train_conda_env
    params:
        plan=PLAN.search_plan_json,
    message:
        "search: rank rung {wildcards.rung}"
    shell:
        "python -m snakeddp.steps search-rung --rung {wildcards.rung:q} --plan {params.plan:q}"
        " --records {input.records:q} --out {output.decision:q} > {log:q} 2>&1"
