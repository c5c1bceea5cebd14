# What every rule file shares besides PLAN (the Snakefile's): readable rerun reasons, Ctrl-C, the
# wildcards' shapes and the container the rules run in.
from snakeddp.compat import snakemake as snakeddp_snakemake
from snakeddp.run import layout as snakeddp_layout
from snakeddp.workflow import interrupt as snakeddp_interrupt
from snakeddp.workflow import reasons as snakeddp_reasons

# A rerun's reason names the config keys that changed, not the run's whole config.
snakeddp_snakemake.name_params_changes(snakeddp_reasons.describe)
# Ctrl-C: a few lines saying what was kept, not each stopped job as a failure (onerror).
if PLAN.typed:
    snakeddp_interrupt.watch_ctrl_c()


wildcard_constraints:
    run=snakeddp_layout.RUN_ID_PATTERN,
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*-[0-9a-f]{10}",
    index=r"\d{5}",
    parts=r"\d+",
    stage=r"data|train|report",
    epochs=r"[1-9]\d*",
    rung=r"\d+",


# The image of `--sdm apptainer` (environment.image); the rules run in the stage envs otherwise.
container: PLAN.container_image
