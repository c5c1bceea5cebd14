# snakeddp: partitioned data -> distributed Lightning training -> report, on any profile.
#   snakemake --profile local     (this machine, snakeddp's supervisor)
#   snakemake --profile slurm     (Slurm, srun/mpirun inside each job)
#   snakemake --profile azureml   (AzureML jobs)
import gc

# What Snakemake imported lives as long as this process: frozen out of the collector's walks, which
# took 0.17 s of each snakemake's CPU after this line, every Slurm job's two included (snakeddp.util.shutdown).
gc.freeze()

from snakemake.logging import logger
from snakemake.utils import min_version

min_version("9.0")


# Refuses to run from a subdirectory of the checkout (every path below is relative to its root).
include: "rules/checkout.smk"
# Snakemake's private parts checked, and the profile's own config entries kept (rules/profile.smk).
include: "rules/profile.smk"


configfile: "config/config.yaml"


snakeddp_snakemake.put_back_profile_config(workflow, config, PROFILE_ASIDE)

from snakeddp.workflow import plan as snakeddp_plan

# The invocation, read once (snakeddp.workflow.plan): the config layered and validated, its runs and
# search, the platform's contract and checks, what every job inherits. Every rule file reads it.
PLAN = snakeddp_plan.read(workflow, config, typed=TYPED_INVOCATION, say=logger.error)


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/env.smk"
include: "rules/train.smk"
include: "rules/search.smk"
include: "rules/report.smk"


# Everything a user looks at: the run table, the report page, the RO-Crate of the runs and the
# record of each stage's environment.
rule all:
    default_target: True
    input:
        rules.report.output,
        expand(rules.env_capture.output.record, stage=["data", "train", "report"]),
    message:
        "all: done"


# Checks when jobs start, the local platform's warm process and relay, and the end (rules/hooks.smk).
include: "rules/hooks.smk"
