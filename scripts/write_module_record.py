"""Snakemake adapter: record which DataModule reads a data.source=module dataset (its stand-in manifest)."""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.data.custom import write_module_record

write_module_record(snakemake.output.record, snakemake.wildcards.dataset, snakemake.params.data)
