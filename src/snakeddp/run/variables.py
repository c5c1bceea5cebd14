"""The ``SNAKEDDP_*`` environment contract: every variable snakeddp passes between its processes.

Settings that do not change what a run computes (the platform, the lock's path, ``network.env``,
``tracking``, the platform's own section) are not part of any run's identity: the workflow exports
them when it starts (``snakeddp.workflow.jobenv``, called once by snakeddp.workflow.plan), every job
inherits them, and changing them never reruns a job. The readers below are how the entry points get
them back. Each name is defined here and nowhere else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from snakeddp.config import site as sites
from snakeddp.config import validate
from snakeddp.config.parts import Launch, Site, Tracking
from snakeddp.data import names as data_names
from snakeddp.errors import ConfigError
from snakeddp.util import cudabuild, rerun, terminal

#: local, slurm, azureml, spark or databricks: how snakeddp.launch starts the ranks (from the profile).
PLATFORM = rerun.PLATFORM_VARIABLE
#: Absolute path of the lock file whose content the environment records hash.
LOCK = "SNAKEDDP_LOCK"
#: The config's ``tracking`` section as JSON, read by rank 0.
TRACKING = "SNAKEDDP_TRACKING"
#: The config's ``site`` section as JSON (what the profile declares its nodes have), read by every rank.
SITE = "SNAKEDDP_SITE"
#: The config's ``network`` section as JSON: which of the exported NCCL_*/GLOO_* variables the config set,
#: for the AzureML submitter, whose jobs must not inherit the submitting shell's (a login node's interfaces).
NETWORK = "SNAKEDDP_NETWORK"
#: ``environment.cuda``: the torch build the AzureML image environment installs (snakeddp.environment.builds).
TORCH_BUILD = "SNAKEDDP_TORCH_BUILD"
#: ``environment.cuda_forward_compat`` ("1" or "0"), read by the GPU checks of the workflow and of every rank.
#: Defined beside its reader, snakeddp.util.cudabuild, which the ranks' checks import without this module.
CUDA_FORWARD_COMPAT = cudabuild.FORWARD_COMPAT
#: The platform's own config section as JSON (its row's section: azureml, spark, databricks), read by its
#: train jobs (the AzureML and Databricks submitters, the Spark driver).
PLATFORM_SECTION = "SNAKEDDP_PLATFORM_SECTION"
#: host:path of the relay in Snakemake's process that writes jobs' progress lines on its terminal (local platform).
#: Defined beside its reader, snakeddp.util.terminal, which every stage imports without this module.
TERMINAL = terminal.VARIABLE
#: A random id of the snakemake invocation, set in its onstart for every job: a table's ingestion that fails
#: names it, and a run of the same invocation training beside it stops at once (snakeddp.data.stream).
INVOCATION = data_names.INVOCATION
#: cpu or gpu: the run's launch.accelerator as snakeddp.launch resolved it (auto: the profile's site, or
#: this machine's GPUs), set for every rank, so the ranks train on what the workflow planned and sized.
ACCELERATOR = "SNAKEDDP_ACCELERATOR"
#: The shell-quoted command that started the ranks, for provenance.
LAUNCH_COMMAND = "SNAKEDDP_LAUNCH_COMMAND"
#: Set by the user: "0" starts every local job and rank as a process of its own; "1", the default, forks
#: the local workflow's jobs from one warm process per invocation (snakeddp.warm) and a node's ranks from
#: one process that imported their modules once (snakeddp.cluster.warm).
WARM_START = "SNAKEDDP_WARM_START"
#: Set by snakeddp's supervisor in every rank: "warm" (forked) or "cold" (a process of its own), for provenance.
RANK_START = "SNAKEDDP_RANK_START"
#: Set by snakeddp.launch for its ranks: "warm" when the train job itself was forked from the workflow's
#: warm process, else "cold", for provenance.
JOB_START = "SNAKEDDP_JOB_START"
#: Set by snakeddp.launch for its ranks: when it started them (seconds since the epoch), so that rank 0's
#: record counts this try's wall time with the earlier tries' (snakeddp.run.tries).
TRY_STARTED = "SNAKEDDP_TRY_STARTED"
#: SNAKEDDP_WARM_SOCKET, the socket of the workflow's warm process (local platform), is defined beside its
#: reader, snakeddp.util.handoff, which every step imports before anything else; SNAKEDDP_RELAYING (Snakemake's
#: process relays a stop it got alone to its jobs) beside its reader, snakeddp.util.relays, which handoff imports.
#: The submitter's commit and dirty flag, where the code ships without .git (AzureML).
CODE_COMMIT = "SNAKEDDP_CODE_COMMIT"
CODE_DIRTY = "SNAKEDDP_CODE_DIRTY"
#: A platform's own variables (the cluster a Databricks run is submitted to, where an AzureML job was sent)
#: are its job side's: snakeddp.<platform>.jobside.
JOB_SPEC_SHA256 = "SNAKEDDP_JOB_SPEC_SHA256"


def platform(env: Mapping[str, str]) -> str:
    """The platform the workflow exported; unset (a step started by hand) the schema's default."""
    return env.get(PLATFORM) or validate({})["platform"]


def lock_path(env: Mapping[str, str]) -> str:
    """The lock file the workflow names; a step started outside the workflow is told how to name it."""
    try:
        return env[LOCK]
    except KeyError:
        raise ConfigError(
            f"{LOCK} is not set, so the environment record cannot name its lock file. "
            f"HINT: run the step through snakemake, or export {LOCK}=envs/requirements.lock."
        ) from None


def _section(env: Mapping[str, str], name: str, key: str) -> dict[str, Any]:
    """A config section from its variable, validated with defaults (all defaults when unset)."""
    try:
        raw = json.loads(env.get(name) or "{}")
    except ValueError as exc:
        raise ConfigError(f"{name} is not JSON: {exc}") from None
    return validate({key: raw}, source=name)[key]


def site(env: Mapping[str, str]) -> Site:
    """The site section from the environment (nothing declared when unset)."""
    return Site.of(_section(env, SITE, "site"))


def settled_site(
    site_section: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]], env: Mapping[str, str], *, deciding: bool
) -> dict[str, Any] | None:
    """``site_section`` where its platform has nothing to decide: an accelerator declared, no run's
    launch.accelerator auto, or, in a job (``deciding`` False), the decision its invocation exported (SITE), so
    a job never asks the cluster again nor decides otherwise; None where the invocation must ask its platform."""
    waiting = any(run["config"]["launch"]["accelerator"] == "auto" for run in runs.values())
    if site_section.get("accelerator") is not None or not waiting:
        return dict(site_section)
    if not deciding:
        decided = json.loads(env.get(SITE) or "{}").get("accelerator")
        return {**site_section, "accelerator": decided} if decided else dict(site_section)
    return None


def network(env: Mapping[str, str]) -> dict[str, Any]:
    """The network section from the environment (no variables when unset)."""
    return _section(env, NETWORK, "network")


def torch_build(env: Mapping[str, str]) -> str:
    """``environment.cuda`` as the workflow exported it; unset means the schema's default."""
    return env.get(TORCH_BUILD) or validate({})["environment"]["cuda"]


def platform_section(env: Mapping[str, str], key: str) -> dict[str, Any]:
    """The platform's section (``key``: its name in the config) from the environment, validated with
    defaults (all defaults when unset: a Databricks job's driver runs the spark platform's with them)."""
    return _section(env, PLATFORM_SECTION, key)


def accelerator(launch: Launch, env: Mapping[str, str]) -> str:
    """A run's launch.accelerator where this process runs, cpu or gpu: as its launch decided it
    (ACCELERATOR), else auto resolved as the workflow resolves it (the profile's site on a cluster,
    this machine's GPUs on the local platform)."""
    decided = env.get(ACCELERATOR)
    if decided in ("cpu", "gpu"):
        return decided
    return sites.resolved(launch, platform(env), site(env), env=env)


def tracking(env: Mapping[str, str]) -> Tracking:
    """The tracking section from the environment, validated with defaults (every tracker off when unset)."""
    return Tracking.of(_section(env, TRACKING, "tracking"))


def import_path(src: str, env: Mapping[str, str]) -> str:
    """The PYTHONPATH every job gets: this checkout's ``src`` first, then ``env``'s (snakeddp warm's too)."""
    return os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
