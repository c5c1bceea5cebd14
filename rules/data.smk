# Dataset stage: one job per partition (parallel, only missing ones), then the manifest.
# Table datasets are first split in one streaming pass; their partition jobs only place the files.
# Every step is `python -m snakeddp.steps ...` (see its docstring for why shell, not script).
# No `group:` here: profiles/slurm groups the data jobs. Snakemake builds groups even when it
# runs locally and checks a whole group for every job it schedules, so a group in the rules made
# planning 1,000 partitions quadratic on every profile (bench/results.md, 6. Workflow overhead).


# A table (CSV/Parquet) split into train partitions and validation, streamed in one pass.
rule data_table:
    input:
        table=PLAN.table_files,
    output:
        ingest=temp(directory("results/data/{dataset}/ingest")),
    log:
        "logs/data/{dataset}/ingest.log",
    # First when cores are few: every partition and run of the dataset waits for it, the records beside it do not.
    priority: 1
    conda:
        "../envs/data.yaml"
    params:
        data=PLAN.dataset_params_json,
    message:
        "data {wildcards.dataset}: ingest the table"
    shell:
        "python -m snakeddp.steps ingest --params {params.data:q} --out {output.ingest:q} > {log:q} 2>&1"


# A windowed table's stream manifest, from its footers and schema (no row read, no checksum): its runs take it
# instead of the manifest, so they start beside data_table, on each partition as it is published (snakeddp.data.stream).
rule data_stream:
    input:
        table=PLAN.table_files,
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


# One train partition: features, labels and sample ids, plus its checksum entry.
rule data_partition:
    input:
        ingest=PLAN.ingested,
    output:
        part="results/data/{dataset}/train/part-{index}.safetensors",
        entry="results/data/{dataset}/train/part-{index}.json",
    log:
        "logs/data/{dataset}/part-{index}.log",
    conda:
        "../envs/data.yaml"
    params:
        data=PLAN.dataset_params_json,
        ingest=lambda wildcards, input: input.ingest or "",
    message:
        "data {wildcards.dataset}: partition {wildcards.index}"
    shell:
        "python -m snakeddp.steps partition --params {params.data:q} --index {wildcards.index}"
        " --ingest={params.ingest:q} --out {output.part:q} --entry {output.entry:q} > {log:q} 2>&1"


# The validation set, drawn from its own seeded stream.
rule data_val:
    input:
        ingest=PLAN.ingested,
    output:
        part="results/data/{dataset}/val.safetensors",
        entry="results/data/{dataset}/val.json",
    log:
        "logs/data/{dataset}/val.log",
    conda:
        "../envs/data.yaml"
    params:
        data=PLAN.dataset_params_json,
        ingest=lambda wildcards, input: input.ingest or "",
    message:
        "data {wildcards.dataset}: validation set"
    shell:
        "python -m snakeddp.steps val --params {params.data:q} --ingest={params.ingest:q}"
        " --out {output.part:q} --entry {output.entry:q} > {log:q} 2>&1"


# The manifest of the first {parts} partitions: per-file sha256, shapes, dtypes, record counts.
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
