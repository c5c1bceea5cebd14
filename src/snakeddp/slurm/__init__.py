"""The slurm platform: each run's train job is a Slurm job, its ranks started inside the allocation by
srun or mpirun (docs/slurm.md), submitted by snakemake-executor-plugin-slurm.

``resources``: a run's layout as the plugin's resources; ``nodes``: what the training partition's nodes
have (scontrol), which settles launch.accelerator auto and refuses a run no node holds; ``watch``: a
submitted job Slurm keeps pending for a reason no wait can clear is cancelled, with a line; ``polling``: how
often the watch and the executor plugin ask Slurm, where the environment says; ``exclude``: a
run that hung on a node is submitted again without it (sbatch --exclude); ``platform``:
the contract (snakeddp.contract) that ties them to the workflow.

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``provenance``, ``remote``, ``report``, ``run``, ``training``, ``util``, ``warm`` (the floors
below its own: tests/test_floors.py).
"""

#: The platform's name: its row in snakeddp.platforms.
PLATFORM = "slurm"
#: A copy of SLURM_CONF under a name Slurm's jobstep plugin does not remove; the workflow sets it
#: (snakeddp.workflow.jobenv) and profiles/slurm/bin/srun restores SLURM_CONF from it.
SLURM_CONF_COPY = "SNAKEDDP_SLURM_CONF"
