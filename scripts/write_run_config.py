"""Snakemake adapter: write one run's resolved config (run.yaml)."""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.runfile import RunFile

run = snakemake.params.run
RunFile(run_id=snakemake.wildcards.run, config=run["config"], point=run["point"]).write(snakemake.output.run)
