"""Snakemake adapter: the curves figure (report_curves) or the scaling figure (report_scaling)."""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.report import figures
from snakeddp.report.runs import runs_from_provenance
from snakeddp.report.table import varying_params
from snakeddp.workflow.terminal import say

say(f"report: {snakemake.output[0]} from {len(snakemake.input.provenance)} runs")
settings = snakemake.params.report
runs = runs_from_provenance(list(snakemake.input.provenance))
if snakemake.rule == "report_curves":
    fig = figures.curves(runs, settings["metrics"])
else:
    fig = figures.scaling(runs, varying_params([run.provenance for run in runs]))
figures.write(fig, snakemake.output.figure, settings["figure_format"], settings["dpi"], snakemake.output.series)
