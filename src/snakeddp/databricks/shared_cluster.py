"""One all-purpose cluster for the runs of an invocation (``databricks.share_cluster``).

A job cluster cannot outlive its run, so a cluster kept across runs is all-purpose compute: created
here when the workflow's jobs start (``create``, in Snakemake's process), its id handed to every train
job (SNAKEDDP_DATABRICKS_CLUSTER), waited for by each before it submits (``ready``), and terminated when
the workflow ends (``terminate``). Terminated, not deleted: Databricks keeps a terminated cluster's
configuration and driver logs for 30 days, where a failed run's page still points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from snakeddp.databricks import DatabricksError, spec, workspace
from snakeddp.databricks.settings import Settings

# Idle minutes after which Databricks terminates the cluster itself: a killed snakemake (kill -9, a lost
# machine) runs no end hook, so this bounds what it leaves running. Above the gap between two runs
# (staging and polling take seconds) and a data stage that overlaps the cluster's start; an idle cluster
# a train job still needs is started again (``ready``).
AUTOTERMINATION_MINUTES = 20
# How long a train job waits for the cluster to come up (Databricks' own waiters allow 20 minutes).
START_S = 1800
STARTING = ("PENDING", "RESTARTING", "RESIZING")


def wanted(settings: Settings, training: int) -> bool:
    """Whether the invocation creates one cluster for its ``training`` runs: only for new_cluster (an
    existing cluster is one already), only when runs are submitted, and for auto when more than one trains."""
    if not settings.submit or settings.existing_cluster_id or not training:
        return False
    share = settings.share_cluster
    return training > 1 if share == "auto" else bool(share)


def cluster_plan(plans: list[spec.JobPlan]) -> spec.JobPlan:
    """The plan a shared cluster is built from: as many workers as the largest run has nodes, a GPU
    cluster (checked as each run's own would be) when any run trains on GPUs."""
    base = next((plan for plan in plans if plan.gpu), plans[0])
    return replace(base, nodes=max(plan.nodes for plan in plans))


def create(w: Any, plans: list[spec.JobPlan], name: str) -> str:
    """Create the cluster without waiting for it (its nodes come up while the data stage runs); its id."""
    cluster = spec.cluster_spec(cluster_plan(plans))
    try:
        created = w.clusters.create(
            spark_version=cluster.spark_version,
            node_type_id=cluster.node_type_id,
            num_workers=cluster.num_workers,
            spark_conf=cluster.spark_conf,
            custom_tags={"snakeddp_shared_cluster": "true"},
            cluster_name=name,
            autotermination_minutes=AUTOTERMINATION_MINUTES,
        )
    except Exception as error:
        raise workspace.api_error("creating the shared cluster (clusters/create)", error) from None
    return created.cluster_id


def ready(w: Any, cluster_id: str, say: Callable[[str], None]) -> None:
    """Return once the cluster is RUNNING: wait while it starts, start it again after its idle
    termination; a cluster that failed to start (or was terminated by hand) is one line with its reason."""
    from databricks.sdk.errors import OperationFailed

    try:
        info = w.clusters.get(cluster_id)
        if state_of(info) == "TERMINATING":  # going as this job looked: idle, or by hand (the reason tells)
            info = w.clusters.wait_get_cluster_terminated(cluster_id, timeout=timedelta(seconds=START_S))
        if terminated_idle(info):
            say(f"the shared cluster {cluster_id} ended after {AUTOTERMINATION_MINUTES} idle minutes; starting it")
            start(w, cluster_id)
            info = w.clusters.get(cluster_id)
        if state_of(info) in STARTING:
            say(f"waiting for the shared cluster {cluster_id} to start ({state_of(info)})")
            w.clusters.wait_get_cluster_running(cluster_id, timeout=timedelta(seconds=START_S))
        elif state_of(info) != "RUNNING":
            raise OperationFailed(state_of(info))
    except OperationFailed:
        raise not_running(cluster_id, w.clusters.get(cluster_id)) from None
    except DatabricksError:
        raise
    except Exception as error:
        raise workspace.api_error(f"waiting for the shared cluster {cluster_id}", error) from None


def start(w: Any, cluster_id: str) -> None:
    """Start a terminated cluster; another train job that started it first is as good."""
    try:
        w.clusters.start(cluster_id)
    except Exception as error:
        if getattr(error, "error_code", None) != "INVALID_STATE":
            raise


def terminate(w: Any, cluster_id: str) -> None:
    """Terminate the cluster (clusters/delete), without waiting for its nodes to go."""
    try:
        w.clusters.delete(cluster_id)
    except Exception as error:
        raise workspace.api_error(f"terminating the shared cluster {cluster_id} (clusters/delete)", error) from None


def state_of(info: Any) -> str:
    return info.state.value if info.state else "UNKNOWN"


def terminated_idle(info: Any) -> bool:
    reason = info.termination_reason
    return state_of(info) == "TERMINATED" and bool(reason and reason.code and reason.code.value == "INACTIVITY")


def not_running(cluster_id: str, info: Any) -> DatabricksError:
    reason = info.termination_reason
    why = reason.code.value if reason and reason.code else "no reason given"
    said = info.state_message or "no message"
    return DatabricksError(
        f"the shared cluster {cluster_id} is {state_of(info)} ({why}: {said}), so the run was not submitted. HINT: "
        "fix what it says (databricks.new_cluster; the cluster's event log in the workspace has the details), then "
        "rerun the same command: the workflow creates a new cluster; or set databricks.share_cluster: false."
    )
