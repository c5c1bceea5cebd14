# Dataset stage: one job per partition (parallel, only missing ones), then the manifest.


# One train partition: features, labels and sample ids, plus its checksum entry.
rule data_partition:
    output:
        part="results/data/{dataset}/train/part-{index}.safetensors",
        entry="results/data/{dataset}/train/part-{index}.json",
    log:
        "logs/data/{dataset}/part-{index}.log",
    group:
        "data"
    conda:
        "../envs/data.yaml"
    params:
        data=get_dataset_params,
    script:
        "../scripts/generate_partition.py"


# The validation set, drawn from its own seeded stream.
rule data_val:
    output:
        part="results/data/{dataset}/val.safetensors",
        entry="results/data/{dataset}/val.json",
    log:
        "logs/data/{dataset}/val.log",
    group:
        "data"
    conda:
        "../envs/data.yaml"
    params:
        data=get_dataset_params,
    script:
        "../scripts/generate_partition.py"


# The manifest of the first {parts} partitions: per-file sha256, shapes, dtypes, record counts.
rule data_manifest:
    input:
        entries=get_partition_entries,
        val=rules.data_val.output.entry,
    output:
        manifest="results/data/{dataset}/manifest-{parts}.json",
    log:
        "logs/data/{dataset}/manifest-{parts}.log",
    # Not in group "data": it would join every partition into one component, so
    # group-components (profiles/slurm) could no longer bundle them N at a time.
    localrule: True
    conda:
        "../envs/data.yaml"
    params:
        data=get_dataset_params,
    script:
        "../scripts/write_manifest.py"
