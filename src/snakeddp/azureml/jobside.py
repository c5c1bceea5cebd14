"""What the azureml platform's jobs and ranks see (snakeddp.platforms.jobside): the variables AzureML sets in
every process of a job (recorded by provenance, naming its node, its run and where rank 0 is) and those the
submitter sets for the job's record. Light: every rank imports it (through snakeddp.platforms)."""

from __future__ import annotations

from collections.abc import Mapping

from snakeddp.platforms.jobside import JobSide

#: What an AzureML job records about where it was sent (set by the submitter, snakeddp.azureml.submit).
SDK = "SNAKEDDP_AZUREML_SDK"
COMPUTE = "SNAKEDDP_AZUREML_COMPUTE"
EXPERIMENT = "SNAKEDDP_AZUREML_EXPERIMENT"
SUBSCRIPTION = "SNAKEDDP_AZUREML_SUBSCRIPTION"
RESOURCE_GROUP = "SNAKEDDP_AZUREML_RESOURCE_GROUP"
WORKSPACE = "SNAKEDDP_AZUREML_WORKSPACE"
#: The job's run id, in every process of the job.
RUN_ID = "AZUREML_RUN_ID"
#: The job's instance count: AzureML's PyTorch distribution exports no LOCAL_WORLD_SIZE (snakeddp.cluster.envvars).
NODE_COUNT = "AZUREML_NODE_COUNT"
#: Rank 0's "addr:port" in a multi-node MPI job; its address alone in a one-node one.
MPI_MASTER = "AZ_BATCH_MASTER_NODE"
MPI_MASTER_SINGLE = "AZ_BATCHAI_MPI_MASTER_NODE"


class AzureMLJobSide(JobSide):
    # Where and how a run ran; not an AzureML job's tokens.
    recorded = frozenset(
        (MPI_MASTER, MPI_MASTER_SINGLE, RUN_ID, NODE_COUNT, "AZUREML_CR_NODE_RANK", "AZUREML_EXPERIMENT_NAME")
    )
    node_variables = ("AZUREML_NODE_NAME",)
    job_id_variables = (RUN_ID,)
    node_count_variables = (NODE_COUNT,)
    multi_node = True

    def rendezvous(self, env: Mapping[str, str]) -> tuple[str | None, int | None]:
        from snakeddp.cluster.base import split_host_port

        if env.get(MPI_MASTER):
            return split_host_port(env[MPI_MASTER])
        return env.get(MPI_MASTER_SINGLE) or None, None


JOB_SIDE = AzureMLJobSide()
