"""Snakemake adapter: write one synthetic partition (or the validation set) and its entry."""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.data.generate import write_synthetic

write_synthetic(
    params=snakemake.params.data,
    split="val" if snakemake.rule == "data_val" else "train",
    index=int(snakemake.wildcards.get("index", 0)),
    path=snakemake.output.part,
    entry_path=snakemake.output.entry,
)
