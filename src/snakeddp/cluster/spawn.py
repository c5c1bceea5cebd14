"""No external launcher: one process, or Lightning spawning its own processes on one node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snakeddp.cluster.base import Launcher, LaunchError, LaunchPlan, Layout, multi_node_hint

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment


class Spawn(Launcher):
    name = "spawn"

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return True

    def __init__(self, devices: int = 1) -> None:
        self.devices = devices

    # Lightning starts ``devices`` processes and re-runs this entry point for ranks 1..N-1
    # with LOCAL_RANK set; rank 0 picks the rendezvous port and passes it on.
    variables = {"local_rank": "LOCAL_RANK", "master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"}
    optional = {"local_rank": 0, "master_addr": "127.0.0.1", "master_port": None}

    def derive(self, values: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        one_node = {"world_size": self.devices, "local_world_size": self.devices, "node_rank": 0, "num_nodes": 1}
        return {**values, **one_node, "rank": values["local_rank"]}

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        from lightning.fabric.plugins.environments import LightningEnvironment

        return LightningEnvironment()

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        if plan.nodes != 1:
            raise LaunchError(f"spawn starts processes on one node only. {multi_node_hint()}.")
        return [plan.python, "-m", "snakeddp.train", *plan.entry], {}
