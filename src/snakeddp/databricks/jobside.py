"""What the databricks platform's jobs see (snakeddp.platforms.jobside): the cluster the workflow created for
its runs to share. Its ranks run as the spark platform's (its row's ``ranks_as``), whose job side they see."""

from __future__ import annotations

from snakeddp.platforms.jobside import JobSide

#: The id of the all-purpose cluster the workflow created for its Databricks runs to share
#: (snakeddp.databricks.shared_cluster), read by each train job: its run is submitted to that cluster.
CLUSTER = "SNAKEDDP_DATABRICKS_CLUSTER"


class DatabricksJobSide(JobSide):
    multi_node = True  # a run's nodes are its job cluster's workers


JOB_SIDE = DatabricksJobSide()
