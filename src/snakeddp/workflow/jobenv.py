"""The environment every job of the workflow inherits, built once when the Snakefile is read.

snakeddp.workflow.plan applies it with one ``os.environ.update``; the names are those of
``snakeddp.run.variables``. Nothing here is a rule parameter, so changing it reruns no job.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp import platforms
from snakeddp.cluster import network
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
        **forward_compat(config),
    }


def forward_compat(config: Mapping[str, Any]) -> dict[str, str]:
    """environment.cuda_forward_compat as the GPU checks read it (snakeddp.util.cudabuild), always set: a later
    invocation that turns it off must not inherit an earlier one's declaration in the same process."""
    declared = bool(config.get("environment", {}).get("cuda_forward_compat", False))
    return {variables.CUDA_FORWARD_COMPAT: "1" if declared else "0"}


def exports(
    config: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    src: str,
    lock_file: str | Path,
    python_bin: str | None,
    checkout: Path,
) -> dict[str, str]:
    """Everything the workflow exports for a validated ``config``, given Snakemake's own ``env``.

    ``src`` goes first on PYTHONPATH (this checkout's package); ``python_bin``, the directory of
    the interpreter Snakemake runs under, goes first on PATH unless a conda env or container
    provides its own ``python`` (then None). The platform adds its section (its row's), what its
    contract exports and the directories its jobs' PATH starts with (``checkout``: this checkout).
    """
    platform = config["platform"]
    row, contract = platforms.row(platform), platforms.load(platform)
    path = env.get("PATH", "")
    if python_bin is not None:
        path = os.pathsep.join([python_bin, path])
    search_path = path.split(os.pathsep)
    first = [folder for folder in contract.path_first(env, checkout) if folder not in search_path]
    path = os.pathsep.join([*first, *search_path])
    out = {
        **settings(config),
        "PYTHONPATH": variables.import_path(src, env),
        variables.PLATFORM: platform,
        variables.LOCK: str(Path(lock_file).resolve()),
        **({variables.PLATFORM_SECTION: json.dumps(config[row.section], sort_keys=True)} if row.section else {}),
        **contract.exports(config, env),
    }
    if path != env.get("PATH", ""):
        out["PATH"] = path
    return out
