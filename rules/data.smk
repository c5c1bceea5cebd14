# Dataset stage: one job per partition (parallel, only missing ones), then the manifest.
# A table is ingested in one job that writes its final files (train/, val.*); its manifest reads them.
# Every step is `python -m snakeddp.steps ...` (see its docstring for why shell, not script).
# No `group:` here: profiles/slurm groups the data jobs. Snakemake builds groups even when it
# runs locally and checks a whole group for every job it schedules, so a group in the rules made
# planning 1,000 partitions quadratic on every profile (bench/results.md, 6. Workflow overhead).


# A table (CSV/Parquet) split into its train partitions and validation, streamed in one pass, each file written
# at its final path with its entry. train/ is a directory output: Snakemake removes it before the job starts and
# when the job fails, and an interrupted job's outputs are marked incomplete (rerun, not trusted); the manifest
# is made only from a finished job's. Only table datasets match here, and only the others data_partition and
# data_val: val.json would otherwise be ambiguous, and a partition inside train/ a ChildIOException.
rule data_table:
    input:
        # The table's content is in the dataset id (its checksum): a file touched, not changed, reruns nothing.
        table=ancient(PLAN.table_files),
    output:
        train=directory("results/data/{dataset}/train"),
        part="results/data/{dataset}/val.safetensors",
        entry="results/data/{dataset}/val.json",
        summary="results/data/{dataset}/ingest.json",
    log:
        "logs/data/{dataset}/ingest.log",
    wildcard_constraints:
        dataset=PLAN.dataset_pattern(table=True),
    # First when cores are few: every run of the dataset waits for it, the records beside it do not.
    priority: 1
    conda:
        "../envs/data.yaml"
    params:
        data=PLAN.dataset_params_json,
        folder=lambda wildcards, output: output.summary.rpartition("/")[0],
    message:
        "data {wildcards.dataset}: ingest the table"
    shell:
        "python -m snakeddp.steps ingest --params {params.data:q} --out {params.folder:q} > {log:q} 2>&1"


# A windowed table's stream manifest, from its footers and schema (no row read, no checksum): its runs take it
# instead of the manifest, so they start beside data_table, on each partition as it is published (snakeddp.data.stream).
rule data_stream:
    input:
        # As data_table's: a touched table would otherwise rewrite it, and retrain every run that trained on it.
        table=ancient(PLAN.table_files),
    output:
        stream="results/data/{dataset}/stream-{parts}.json",
    log:
        "logs/data/{dataset}/stream-{parts}.log",
    # Beside ingestion, ahead of the jobs no training waits for: the runs start on it.
    priority: 1
    localrule: True
    conda:
        "../envs/data.yaml"
    params:
        data=PLAN.dataset_params_json,
    message:
        "data {wildcards.dataset}: the stream manifest of {wildcards.parts} partitions"
    shell:
        "python -m snakeddp.steps stream --params {params.data:q} --dataset {wildcards.dataset:q}"
        " --out {output.stream:q} > {log:q} 2>&1"


# One train partition of a generated dataset: features, labels and sample ids, plus its checksum entry.
# Its command and its parameters are Snakemake's rerun key: --ingest stays in the text (empty), and the
# parameter stays derived (a function of the input), which Snakemake leaves out of the key.
rule data_partition:
    output:
        part="results/data/{dataset}/train/part-{index}.safetensors",
        entry="results/data/{dataset}/train/part-{index}.json",
    log:
        "logs/data/{dataset}/part-{index}.log",
    wildcard_constraints:
        dataset=PLAN.dataset_pattern(table=False),
    conda:
        "../envs/data.yaml"
    params:
        data=PLAN.dataset_params_json,
        ingest=lambda wildcards, input: "",
    message:
        "data {wildcards.dataset}: partition {wildcards.index}"
    shell:
        "python -m snakeddp.steps partition --params {params.data:q} --index {wildcards.index}"
        " --ingest={params.ingest:q} --out {output.part:q} --entry {output.entry:q} > {log:q} 2>&1"


# A generated dataset's validation set, drawn from its own seeded stream (a table's: data_table).
rule data_val:
    output:
        part="results/data/{dataset}/val.safetensors",
        entry="results/data/{dataset}/val.json",
    log:
        "logs/data/{dataset}/val.log",
    wildcard_constraints:
        dataset=PLAN.dataset_pattern(table=False),
    conda:
        "../envs/data.yaml"
    params:
        data=PLAN.dataset_params_json,
        ingest=lambda wildcards, input: "",
    message:
        "data {wildcards.dataset}: validation set"
    shell:
        "python -m snakeddp.steps val --params {params.data:q} --ingest={params.ingest:q}"
        " --out {output.part:q} --entry {output.entry:q} > {log:q} 2>&1"


# The manifest of the first {parts} partitions: per-file sha256, shapes, dtypes, record counts. A table's
# partitions are its ingestion's train/ folder, whose entries the step reads (snakeddp.steps manifest).
rule data_manifest:
    input:
        entries=PLAN.partition_entries,
        val=rules.data_val.output.entry,
    output:
        manifest="results/data/{dataset}/manifest-{parts}.json",
    log:
        "logs/data/{dataset}/manifest-{parts}.log",
    # Not in profiles/slurm's group "data": it would join every partition into one component,
    # so group-components could no longer bundle them N at a time.
    localrule: True
    conda:
        "../envs/data.yaml"
    params:
        data=PLAN.dataset_params_json,
    message:
        "data {wildcards.dataset}: checksum {wildcards.parts} partitions into the manifest"
    shell:
        "python -m snakeddp.steps manifest --params {params.data:q} --dataset {wildcards.dataset:q}"
        " --val {input.val:q} --out {output.manifest:q} --entries {input.entries:q} > {log:q} 2>&1"


# data.source module: no partitions, only the record of the DataModule that reads the data.
rule data_module:
    output:
        record="results/data/{dataset}/module.json",
    log:
        "logs/data/{dataset}/module.log",
    localrule: True
    conda:
        "../envs/data.yaml"
    params:
        data=PLAN.dataset_params_json,
    message:
        "data {wildcards.dataset}: record the data module"
    shell:
        "python -m snakeddp.steps module --params {params.data:q} --dataset {wildcards.dataset:q}"
        " --out {output.record:q} > {log:q} 2>&1"
