"""Snakemake adapter: one row per run in results/report/runs.csv."""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.report.table import write_runs_table

write_runs_table(list(snakemake.input.provenance), snakemake.output.table)
