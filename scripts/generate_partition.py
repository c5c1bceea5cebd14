"""Snakemake adapter: write one partition (or the validation set) and its entry.

Synthetic partitions are generated here; table partitions were written by the ingestion pass
and are only put in place.
"""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.data.generate import write_synthetic
from snakeddp.data.table import place

split = "val" if snakemake.rule == "data_val" else "train"
index = int(snakemake.wildcards.get("index", 0))
if snakemake.params.data["source"] == "table":
    place(snakemake.input.ingest, split, index, snakemake.output.part, snakemake.output.entry)
else:
    write_synthetic(
        params=snakemake.params.data,
        split=split,
        index=index,
        path=snakemake.output.part,
        entry_path=snakemake.output.entry,
    )
