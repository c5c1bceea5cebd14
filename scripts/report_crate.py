"""Snakemake adapter: the Workflow Run RO-Crate in results/report/."""

import json
import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.report.page import write_crate
from snakeddp.workflow.terminal import say

say(f"report: {snakemake.output[0]} from {len(snakemake.input.provenance)} runs")
write_crate(
    provenance=list(snakemake.input.provenance),
    settings=snakemake.params.report,
    repo=Path(snakemake.input.workflow[0]).parent,  # the Snakefile comes first
    config_files=snakemake.params.configfiles,
    resolved_config=json.loads(snakemake.params.config),
    report_files=list(snakemake.input.report),
    out=snakemake.output.crate,
)
