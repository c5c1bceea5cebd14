"""Snakemake adapter: collect the partitions' checksum entries into the dataset manifest."""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.data.generate import write_dataset_manifest

write_dataset_manifest(
    path=snakemake.output.manifest,
    dataset=snakemake.wildcards.dataset,
    params=snakemake.params.data,
    train_entries=list(snakemake.input.entries),
    val_entry=snakemake.input.val,
)
