"""Snakemake adapter: one row per run in results/report/runs.csv."""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.report.table import write_runs_table
from snakeddp.workflow.terminal import say

say(f"report: {snakemake.output[0]} from {len(snakemake.input.provenance)} runs")
write_runs_table(list(snakemake.input.provenance), snakemake.output.table)
