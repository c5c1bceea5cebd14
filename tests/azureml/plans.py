"""A run's AzureML job plan as its train job builds it: snakeddp.remote.job's steps (the run's identity, the
attempt it resumes staged), then AzureMLJob's own (``submit.build_plan``), for the tests that read the spec."""

from __future__ import annotations

from argparse import Namespace

from snakeddp.azureml import submit
from snakeddp.azureml.plan import JobPlan
from snakeddp.azureml.settings import Settings


def build_plan(args: Namespace, settings: Settings) -> tuple[JobPlan, str]:
    """The plan of the run ``args`` name (snakeddp.launch's), and its attempt key."""
    job = submit.AzureMLJob(Namespace(**{"dry_run": True, **vars(args)}), settings)
    identity, origin = job.identify()
    resume_dir = job.stage_attempt(identity, origin)
    return submit.build_plan(job, resume_dir), identity.key
