"""Processes started by a platform that exports torch's standard variables.

AzureML's PyTorch distribution starts ``process_count_per_instance`` processes on each node
with MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE and NODE_RANK set (no GROUP_RANK or
TORCHELASTIC_RUN_ID, so Lightning's TorchElasticEnvironment does not recognise them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snakeddp import platforms
from snakeddp.cluster.base import Launcher, LaunchError, Layout

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment


class EnvVars(Launcher):
    name = "env"
    variables = {
        "rank": "RANK",
        "local_rank": "LOCAL_RANK",
        "world_size": "WORLD_SIZE",
        "node_rank": "NODE_RANK",
        "local_world_size": "LOCAL_WORLD_SIZE",
        "master_addr": "MASTER_ADDR",
        "master_port": "MASTER_PORT",
    }
    optional = {"node_rank": 0, "local_world_size": None}

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return all(name in env for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"))

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        from snakeddp.cluster.environment import StaticEnvironment

        return StaticEnvironment(layout)

    def derive(self, values: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        world, local_world = values["world_size"], values["local_world_size"]
        if local_world is None:
            if nodes := platforms.node_count(env):
                local_world = world // nodes
            elif values["node_rank"] == 0 and values["rank"] == values["local_rank"] and world == 1:
                local_world = 1
            else:
                raise LaunchError(
                    "env: cannot tell processes per node. HINT: set LOCAL_WORLD_SIZE (or the job's node count: "
                    f"{' or '.join(platforms.node_count_variables())})."
                )
        job_id = platforms.job_id(env)
        return {**values, "local_world_size": local_world, "num_nodes": world // local_world, "job_id": job_id}
