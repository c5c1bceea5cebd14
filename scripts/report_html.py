"""Snakemake adapter: the self-contained results/report/report.html."""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.report.page import write_report
from snakeddp.workflow.terminal import say

say(f"report: {snakemake.output[0]} from {len(snakemake.input.provenance)} runs")
write_report(
    provenance=list(snakemake.input.provenance),
    settings=snakemake.params.report,
    curves=snakemake.input.curves,
    scaling=snakemake.input.scaling or None,
    out=snakemake.output.html,
)
