"""The environment every job of the workflow inherits, built once when the Snakefile is read.

rules/common.smk applies it with one ``os.environ.update``; the names are those of
``snakeddp.run.variables``. Nothing here is a rule parameter, so changing it reruns no job.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.cluster import network
from snakeddp.cluster.slurm import SLURM_CONF_COPY
from snakeddp.run import variables


def settings(config: Mapping[str, Any]) -> dict[str, str]:
    """The settings outside a run's identity that reach its jobs: ``network.env``, ``tracking``, ``site``
    and the torch build (``environment.cuda``, which the AzureML submitter builds its image environment with).

    ``network.env`` goes twice: as the variables themselves (ranks started here inherit them) and as
    JSON, so the AzureML submitter can tell the config's from those the submitting shell exported.
    """
    return {
        **network.variables(config),
        variables.NETWORK: json.dumps(config.get("network", {}), sort_keys=True),
        variables.TRACKING: json.dumps(config.get("tracking", {}), sort_keys=True),
        variables.SITE: json.dumps(config.get("site", {}), sort_keys=True),
        **({variables.TORCH_BUILD: config["environment"]["cuda"]} if "environment" in config else {}),
    }


def exports(
    config: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    src: str,
    lock_file: str | Path,
    python_bin: str | None,
    slurm_bin: str,
) -> dict[str, str]:
    """Everything the workflow exports for a validated ``config``, given Snakemake's own ``env``.

    ``src`` goes first on PYTHONPATH (this checkout's package); ``python_bin``, the directory of
    the interpreter Snakemake runs under, goes first on PATH unless a conda env or container
    provides its own ``python`` (then None). On Slurm with a config outside /etc/slurm, the
    jobstep plugin drops SLURM_CONF before it calls srun: a copy is kept and ``slurm_bin``'s srun,
    which restores it, goes first on PATH.
    """
    platform = config["platform"]
    path = env.get("PATH", "")
    if python_bin is not None:
        path = os.pathsep.join([python_bin, path])
    out = {
        **settings(config),
        "PYTHONPATH": os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p),
        variables.PLATFORM: platform,
        variables.LOCK: str(Path(lock_file).resolve()),
    }
    if platform == "azureml":
        out[variables.AZUREML_CONFIG] = json.dumps(config["azureml"])
    if platform == "spark":
        out[variables.SPARK_CONFIG] = json.dumps(config["spark"], sort_keys=True)
    if platform == "databricks":
        out[variables.DATABRICKS_CONFIG] = json.dumps(config["databricks"], sort_keys=True)
    if platform == "slurm" and env.get("SLURM_CONF"):
        search_path = path.split(os.pathsep)
        out[SLURM_CONF_COPY] = env["SLURM_CONF"]
        path = os.pathsep.join(search_path if slurm_bin in search_path else [slurm_bin, *search_path])
    if path != env.get("PATH", ""):
        out["PATH"] = path
    return out
