"""The sbatch command snakemake-executor-plugin-slurm builds for a train job, from the plugin's own code:
shared by the unit tests of the train rule's resources (tests/workflow/test_slurm.py) and the
real cluster's checks of them (tests/slurm/test_slurm_gpu.py)."""

from __future__ import annotations

from types import SimpleNamespace

from snakemake.iocontainers import ResourceList
from snakemake_executor_plugin_slurm.submit_string import get_submit_command
from snakemake_executor_plugin_slurm.utils import set_gres_string

from snakeddp import config
from snakeddp.config import parts
from snakeddp.config import site as site_config
from snakeddp.slurm.resources import slurm_resources


def train_resources(launch: dict, site: dict | None = None, platform: str = "slurm") -> dict:
    """The train rule's resources as snakeddp.workflow.plan.Plan.train_resources computes them on the slurm platform."""
    resolved = parts.Launch.of(config.validate({"launch": launch})["launch"])
    site = parts.Site.of(config.validate({"site": site or {}})["site"])
    accelerator = site_config.resolved(resolved, platform, site)
    resources = {
        "nodes": resolved.nodes,
        "mem_mb": site_config.mem_mb(resolved, accelerator, site),
        "runtime": resolved.runtime,
    }
    return {**resources, **slurm_resources(resolved, accelerator, site)}


def submit_command(resources: dict, **params) -> str:
    """The sbatch command line the plugin builds for a job with ``resources``."""
    job = SimpleNamespace(resources=ResourceList(fromdict=resources), threads=1)
    params = {
        "run_uuid": "run",
        "slurm_logfile": "log",
        "comment_str": "c",
        "account": "",
        "partition": "",
        "workdir": "",
        **params,
    }
    return get_submit_command(job, params) + set_gres_string(job)
