"""What the slurm platform's jobs and ranks see (snakeddp.platforms.jobside): the variables Slurm sets that
provenance records, the node and job a rank runs in, the srun launcher, and the allocation mpirun runs
inside. Light: every rank imports it (through snakeddp.platforms); the launcher loads when asked for."""

from __future__ import annotations

from collections.abc import Mapping

from snakeddp.platforms.jobside import Allocation, JobSide


class SlurmJobSide(JobSide):
    # Where and how a run ran; not a site's SLURM_JWT.
    recorded = frozenset(
        """
        SLURM_JOB_ID SLURM_JOB_NAME SLURM_JOB_NODELIST SLURM_NODELIST SLURM_STEP_NODELIST SLURM_NNODES
        SLURM_JOB_NUM_NODES SLURM_NTASKS SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE SLURM_PROCID SLURM_LOCALID
        SLURM_NODEID SLURM_STEP_ID SLURM_CLUSTER_NAME SLURM_JOB_PARTITION SLURM_JOB_ACCOUNT SLURM_JOB_QOS
        SLURM_CPUS_PER_TASK SLURM_CPUS_ON_NODE SLURM_GPUS SLURM_GPUS_PER_NODE SLURM_GPUS_ON_NODE SLURM_JOB_GPUS
        SLURM_STEP_GPUS SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID SLURM_RESTART_COUNT SLURM_SUBMIT_HOST SLURMD_NODENAME
        """.split()
    )
    node_variables = ("SLURMD_NODENAME",)
    job_id_variables = ("SLURM_JOB_ID",)
    launchers = {"srun": "snakeddp.slurm.launcher:Srun"}
    multi_node = True

    def allocation(self, env: Mapping[str, str]) -> Allocation | None:
        if "SLURM_JOB_ID" not in env:
            return None
        from snakeddp.slurm.launcher import SlurmAllocation

        return SlurmAllocation()

    def rendezvous(self, env: Mapping[str, str]) -> tuple[str | None, int | None]:
        if "SLURM_JOB_NODELIST" not in env:
            return None, None
        from snakeddp.slurm.launcher import first_node, job_port

        return first_node(env), job_port(env)


JOB_SIDE = SlurmJobSide()
