"""What the toy platform's jobs and ranks see (snakeddp.platforms.jobside.JobSide)."""

from snakeddp.platforms.jobside import JobSide
from snakeddp_toy import JOB, NODE


class ToyJobSide(JobSide):
    recorded = frozenset((NODE, JOB))
    node_variables = (NODE,)
    job_id_variables = (JOB,)


JOB_SIDE = ToyJobSide()
