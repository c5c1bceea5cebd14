# Search stage (search: in the config): successive halving over the sweep's configurations.
# Rung k trains its configurations' runs to SEARCH.budgets[k] epochs (search_train, continuing
# from the previous rung's checkpoint), and the checkpoint rule search_rung ranks them and names
# the configurations rung k+1 trains: the DAG grows rung by rung, and stays one workflow.

# Configuration id -> its runs (one per seed); the search's plan as the rungs' parameter.
SEARCH_GROUPS = snakeddp_search.configurations(RUNS) if SEARCH else {}
SEARCH_PLAN_JSON = snakeddp_search.plan_json(SEARCH, SEARCH_GROUPS) if SEARCH else ""


def search_runs(rung):
    """The runs rung ``rung`` trains: every configuration's at rung 0, then the ones the rung
    before promoted (its decision is a checkpoint: Snakemake asks again once it exists).
    """
    if rung == 0:
        promoted = list(SEARCH_GROUPS)
    else:
        decision = checkpoints.search_rung.get(rung=rung - 1).output.decision
        promoted = snakeddp_search.survivors(snakeddp_search.read_decision(decision))
    # A configuration the sweep no longer has is not trained; the rung's decision is made again.
    return [
        run for cid in promoted if cid in SEARCH_GROUPS for run in SEARCH_GROUPS[cid]
    ]


def search_record(run, rung):
    """Where a run's record at a rung is: the top rung trains the run's whole budget (rule train)."""
    if rung == SEARCH.top:
        return rules.train.output.provenance.format(run=run)
    return rules.search_train.output.record.format(run=run, epochs=SEARCH.budgets[rung])


def get_rung_records(wildcards):
    rung = int(wildcards.rung)
    if rung > SEARCH.top:
        snakeddp_preflight.stop(
            f"search: rung {rung} is beyond the plan's last rung ({SEARCH.top}). HINT: ask for "
            "results/search/rung-<k>.json with k up to the last rung, or for the report."
        )
    return [search_record(run, rung) for run in search_runs(rung)]


def get_search_plan_json(wildcards):
    return SEARCH_PLAN_JSON


def get_report_runs():
    """The runs the report shows: every run, or those a search trained to its top rung."""
    return search_runs(SEARCH.top) if SEARCH else list(RUNS)


# A run's config at one rung's budget: run.yaml with trainer.max_epochs set to the rung's epochs.
rule search_run_config:
    message:
        "run {wildcards.run}: write its config for {wildcards.epochs} epochs"
    output:
        run="results/search/{run}/epochs-{epochs}.yaml",
    log:
        "logs/search/{run}.epochs-{epochs}.config.log",
    localrule: True
    conda:
        "../envs/train.yaml"
    params:
        run=get_budget_run_json,
    shell:
        "python -m snakeddp.steps run-config --run-id {wildcards.run:q} --run {params.run:q}"
        " --out {output.run:q} > {log:q} 2>&1"


# Train one run to a rung's budget, in its own run directory; its record goes beside the config.
rule search_train:
    message:
        "run {wildcards.run}: train to epoch {wildcards.epochs} (log: logs/search/{wildcards.run}.epochs-{wildcards.epochs}.log)"
    input:
        run=rules.search_run_config.output.run,
        manifest=get_manifest,
        environment="results/envs/train.json",
    output:
        record="results/search/{run}/epochs-{epochs}.json",
    log:
        "logs/search/{run}.epochs-{epochs}.log",
    conda:
        "../envs/train.yaml"
    threads: get_train_threads
    resources:
        **TRAIN_RESOURCES,
    shell:
        "python -m snakeddp.launch --config {input.run:q}"
        " --run-dir results/runs/{wildcards.run:q} --data {input.manifest:q}"
        " --environment-record {input.environment:q} --record-to {output.record:q} > {log:q} 2>&1"


# Rank one rung's configurations and name those the next rung trains.
checkpoint search_rung:
    message:
        "search: rank rung {wildcards.rung}"
    input:
        records=get_rung_records,
    output:
        decision="results/search/rung-{rung}.json",
    log:
        "logs/search/rung-{rung}.log",
    localrule: True
    conda:
        "../envs/train.yaml"
    params:
        plan=get_search_plan_json,
    shell:
        "python -m snakeddp.steps search-rung --rung {wildcards.rung:q} --plan {params.plan:q}"
        " --records {input.records:q} --out {output.decision:q} > {log:q} 2>&1"
