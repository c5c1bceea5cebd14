"""What the nodes a run trains on have, asked of the workspace: ``launch.accelerator: auto`` on Databricks is
gpu where the cluster's worker node type has GPUs, and a GPU run is refused before submission where its nodes
have fewer GPUs than its ranks per node.

The workspace's node types carry their GPUs (``clusters.list_node_types``: each NodeType's ``num_gpus``), so
no name pattern decides it (cloud GPU families are renamed and added: p6-b200.48xlarge, gr6.4xlarge). The
node type is ``databricks.new_cluster.node_type_id``, or the existing cluster's (``clusters.get``), which is
checked the same way. Asked only where the credentials resolve (snakeddp.databricks.workspace.connect).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from snakeddp.databricks import DatabricksError
from snakeddp.databricks.settings import Settings


@dataclass(frozen=True)
class Nodes:
    """The worker node type of the cluster the runs train on, and its GPUs."""

    node_type: str
    gpus: int
    #: Where the node type was named: databricks.new_cluster.node_type_id, or the existing cluster.
    named_by: str

    @property
    def accelerator(self) -> str:
        return "gpu" if self.gpus else "cpu"

    def describe(self) -> str:
        return f"{self.named_by} is node type {self.node_type}, with {self.gpus} GPU{'s' if self.gpus != 1 else ''}"


def gpus_by_node_type(client: Any) -> dict[str, int]:
    """Every node type of the workspace, with its GPUs."""
    from snakeddp.databricks.workspace import api_error

    try:
        listed = client.clusters.list_node_types().node_types or []
    except Exception as error:  # the SDK's DatabricksError family: refused, unreachable
        raise api_error("listing the workspace's node types", error) from None
    return {node.node_type_id: node.num_gpus or 0 for node in listed}


def of_section(client: Any, settings: Settings) -> Nodes | None:
    """The worker nodes of the cluster the config's databricks: section trains on; None where it names no
    node type (a cluster policy chooses it)."""
    from snakeddp.databricks.workspace import api_error

    existing = settings.existing_cluster_id
    if existing:
        try:
            node_type = client.clusters.get(existing).node_type_id
        except Exception as error:
            raise api_error(f"looking up databricks.existing_cluster_id {existing}", error) from None
        named_by = f"the existing cluster {existing}"
    else:
        node_type = settings.new_cluster.node_type_id
        named_by = "databricks.new_cluster.node_type_id"
    if not node_type:
        return None
    known = gpus_by_node_type(client)
    if node_type not in known:
        raise DatabricksError(
            f"{named_by} is node type {node_type}, which this workspace does not offer. HINT: set one that "
            "`databricks clusters list-node-types` lists (with its num_gpus)."
        )
    return Nodes(node_type, known[node_type], named_by)


def check_runs(nodes: Nodes, launches: Mapping[str, Any]) -> None:
    """Each GPU run (``launches``: run id -> (Launch, accelerator)) against the GPUs of a node: more ranks per
    node than it has GPUs would stop every rank after the cluster started."""
    for run_id, (launch, accelerator) in launches.items():
        if accelerator != "gpu" or launch.devices <= nodes.gpus:
            continue
        fix = (
            f"set launch.devices to at most {nodes.gpus} (more launch.nodes for more ranks)"
            if nodes.gpus
            else "set launch.accelerator: cpu"
        )
        raise DatabricksError(
            f"run {run_id} trains {launch.devices} GPU ranks per node, and {nodes.describe()}. HINT: {fix}, or "
            "a node type with more GPUs (`databricks clusters list-node-types` lists them with their num_gpus)."
        )
