"""Processes started by a platform that exports torch's standard variables.

AzureML's PyTorch distribution starts ``process_count_per_instance`` processes on each node
with MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE and NODE_RANK set (no GROUP_RANK or
TORCHELASTIC_RUN_ID, so Lightning's TorchElasticEnvironment does not recognise them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from snakeddp.cluster.base import Launcher, LaunchError, Layout, env_int

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

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return all(name in env for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"))

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        from snakeddp.cluster.environment import StaticEnvironment

        return StaticEnvironment(layout)

    def layout(self, env: Mapping[str, str]) -> Layout:
        v = self.variables
        world, rank = env_int(env, v["world_size"], self.name), env_int(env, v["rank"], self.name)
        local_rank = env_int(env, v["local_rank"], self.name)
        node_rank = env_int(env, v["node_rank"], self.name) if v["node_rank"] in env else 0
        if v["local_world_size"] in env:
            local_world = env_int(env, v["local_world_size"], self.name)
        elif env.get("AZUREML_NODE_COUNT", "").isdigit():
            local_world = world // int(env["AZUREML_NODE_COUNT"])
        elif node_rank == 0 and rank == local_rank and world == 1:
            local_world = 1
        else:
            raise LaunchError(
                "env: cannot tell processes per node; set LOCAL_WORLD_SIZE (AzureML sets AZUREML_NODE_COUNT)"
            )
        return Layout(
            launcher=self.name,
            rank=rank,
            local_rank=local_rank,
            world_size=world,
            local_world_size=local_world,
            node_rank=node_rank,
            num_nodes=world // local_world,
            master_addr=env[v["master_addr"]],
            master_port=env_int(env, v["master_port"], self.name),
            job_id=env.get("AZUREML_RUN_ID"),
        )
