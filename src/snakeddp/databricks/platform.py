"""The databricks platform's contract: databricks-sdk and each run's request checked before any job (no
credentials needed); launch.accelerator auto decided from the workspace's node types where the credentials
resolve (snakeddp.databricks.nodes), and each GPU run checked against its nodes' GPUs when it is about to be
submitted; the cluster the runs share created then (snakeddp.databricks.shared_cluster) and terminated when
the workflow ends; a train job submits the run as a one-time Jobs run and follows it
(snakeddp.databricks.submit)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snakeddp import platforms
from snakeddp.config import ConfigError, site
from snakeddp.contract import Invocation, PreflightError, RemotePlatform, Runs
from snakeddp.databricks import PLATFORM, jobside
from snakeddp.databricks.settings import Settings
from snakeddp.errors import print_line
from snakeddp.run import variables as names


@dataclass
class DatabricksState:
    nodes: Any = None  # the worker nodes the runs train on (snakeddp.databricks.nodes), asked of the workspace
    nodes_asked: bool = False  # once: None is an answer too (the credentials did not resolve)
    shared: tuple[Any, str] | None = None  # the client and id of the cluster this invocation created


def plans(invocation: Invocation[DatabricksState], runs: Runs) -> list[Any]:
    """Each run's job plan as its train job will make it, before anything is staged."""
    # Imported here: databricks-sdk is an optional extra, and spec imports it only to build requests.
    from snakeddp.databricks import spec

    made, settings = [], invocation.settings_as(Settings)
    for run_id in runs:
        manifest, code = "results/data/manifest.json", "code/unstaged"  # the paths are checked when staged
        launch = invocation.launches[run_id]
        # The accelerator as the job will resolve it (auto: the profile's site), so a GPU run's cluster is checked.
        try:
            gpu = site.resolved(launch, PLATFORM, invocation.site, run_id=run_id) == "gpu"
        except site.SiteError:
            gpu = False  # auto undecided: refused by the run's own check, after the section's (preflight.check_run)
        made.append(spec.plan_for(run_id, launch, settings, manifest, code=code, gpu=gpu, variables={}))
    return made


def check_requests(invocation: Invocation[DatabricksState], runs: Runs) -> None:
    """databricks-sdk installed, and each run's request one the Jobs API takes."""
    from snakeddp.databricks import spec, workspace

    try:
        workspace.require_sdk()
        for plan in plans(invocation, runs):
            spec.submit_request(plan)
    except ConfigError as error:
        raise PreflightError(str(error)) from None


def check_credentials(settings: Settings, to_train: Runs) -> Any:
    """databricks-sdk's credential chain resolves, before the first job, when a run will be submitted;
    the checked client, or None when nothing will be."""
    if not to_train or not settings.submit:
        return None
    from snakeddp.databricks import workspace

    try:
        return workspace.connect(settings.profile)
    except ConfigError as error:
        raise PreflightError(str(error)) from None


def share_cluster(invocation: Invocation[DatabricksState], client: Any, training: Runs) -> None:
    """The cluster the pending train jobs share, created once and handed to them (the jobs inherit
    Snakemake's environment), when the section asks for one."""
    from snakeddp.databricks import shared_cluster

    if client is None or not shared_cluster.wanted(invocation.settings_as(Settings), len(training)):
        return
    name = f"snakeddp: {len(training)} runs of {Path.cwd().name}"
    try:
        cluster_id = shared_cluster.create(client, plans(invocation, training), name)
    except ConfigError as error:
        raise PreflightError(str(error)) from None
    invocation.state.shared = (client, cluster_id)
    os.environ[jobside.CLUSTER] = cluster_id
    invocation.say(
        f"snakeddp.databricks: the {len(training)} runs share the all-purpose cluster {cluster_id}, terminated "
        f"when the workflow ends (or after {shared_cluster.AUTOTERMINATION_MINUTES} idle minutes)"
    )


def end_shared_cluster(invocation: Invocation[DatabricksState]) -> None:
    """Terminate the cluster this invocation created; a failure is one line (its autotermination remains)."""
    from snakeddp.databricks import shared_cluster

    if invocation.state.shared is None:
        return
    (client, cluster_id), invocation.state.shared = invocation.state.shared, None
    try:
        shared_cluster.terminate(client, cluster_id)
    except ConfigError as error:
        failed = str(error).split(" HINT:")[0].rstrip(".")
        invocation.say(
            f"snakeddp.databricks: {failed}. HINT: terminate it yourself (`databricks clusters delete {cluster_id}`); "
            f"else Databricks does after {shared_cluster.AUTOTERMINATION_MINUTES} idle minutes."
        )
        return
    invocation.say(f"snakeddp.databricks: terminated the shared cluster {cluster_id}")


def workspace_nodes(invocation: Invocation[DatabricksState]) -> Any:
    """The worker nodes of the cluster the runs train on, asked of the workspace once per invocation; None where
    the credentials do not resolve (a dry run away from the workspace) or no node type is named."""

    def ask() -> Any:
        from snakeddp.databricks import nodes, workspace

        settings = invocation.settings_as(Settings)
        try:
            return nodes.of_section(workspace.connect(settings.profile), settings)
        except ConfigError:
            return None  # before_jobs checks the credentials, and says why in one line

    if not invocation.state.nodes_asked:
        invocation.state.nodes, invocation.state.nodes_asked = ask(), True
    return invocation.state.nodes


def settle_site(invocation: Invocation[DatabricksState], env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The site with auto decided from the node type's GPUs where a run needs it and the profile declares
    nothing, said in one line; a job takes its invocation's decision (exported in the site section)."""
    site_section = dict(invocation.config["site"])
    settled = names.settled_site(site_section, invocation.runs, env, deciding=invocation.typed)
    if settled is not None:
        return settled
    found = workspace_nodes(invocation)
    if found is None:
        return site_section  # auto is refused, naming the declaration, where the workspace cannot say
    print_line(f"snakeddp: launch.accelerator auto on Databricks means {found.accelerator} ({found.describe()}).")
    return {**site_section, "accelerator": found.accelerator}


def check_nodes(invocation: Invocation[DatabricksState], training: Runs) -> None:
    """Each GPU run against the GPUs of the nodes it would train on (new or existing cluster), before it is
    submitted; nothing where the workspace names no node type."""
    from snakeddp.databricks import nodes

    found = workspace_nodes(invocation)
    if found is None or not training:
        return
    launches = {run_id: invocation.launches[run_id] for run_id in training}
    resolved = {
        run_id: (launch, site.resolved(launch, PLATFORM, invocation.site)) for run_id, launch in launches.items()
    }
    try:
        nodes.check_runs(found, resolved)
    except ConfigError as error:
        raise PreflightError(str(error)) from None


class Databricks(RemotePlatform[DatabricksState]):
    row = platforms.row(PLATFORM)

    def new_state(self) -> DatabricksState:
        return DatabricksState()

    def settle_site(self, invocation: Invocation[DatabricksState]) -> dict[str, Any]:
        return settle_site(invocation)

    def check(self, invocation: Invocation[DatabricksState]) -> None:
        check_requests(invocation, invocation.runs)

    def before_jobs(self, invocation: Invocation[DatabricksState], to_train: Runs, training: Runs, cores: int) -> None:
        client = check_credentials(invocation.settings_as(Settings), to_train)
        if client is not None:
            check_nodes(invocation, training)
        share_cluster(invocation, client, training)

    def close(self, invocation: Invocation[DatabricksState]) -> None:
        end_shared_cluster(invocation)

    def submit(self, args: argparse.Namespace) -> int:
        from snakeddp.databricks.submit import main  # the databricks extra, imported only here

        return main(args)


CONTRACT = Databricks()
