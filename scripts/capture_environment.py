"""Snakemake adapter: record the environment a stage runs in, with its hash."""

import sys

sys.stderr = open(snakemake.log[0], "w")

from snakeddp.envcapture import capture

capture(
    stage=snakemake.wildcards.stage,
    lock_path=snakemake.input.lock,
    out_path=snakemake.output.record,
    image=snakemake.params.image,
)
