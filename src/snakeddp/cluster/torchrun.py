"""torchrun (torch.distributed.run): the local profile's launcher, one node, N processes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from snakeddp.cluster.base import Launcher, LaunchError, LaunchPlan, Layout, env_int

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment


class TorchRun(Launcher):
    name = "torchrun"
    variables = {
        "rank": "RANK",
        "local_rank": "LOCAL_RANK",
        "world_size": "WORLD_SIZE",
        "local_world_size": "LOCAL_WORLD_SIZE",
        "node_rank": "GROUP_RANK",
        "master_addr": "MASTER_ADDR",
        "master_port": "MASTER_PORT",
        "job_id": "TORCHELASTIC_RUN_ID",
    }

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "TORCHELASTIC_RUN_ID" in env and "LOCAL_WORLD_SIZE" in env

    def layout(self, env: Mapping[str, str]) -> Layout:
        v = self.variables
        world, local_world = env_int(env, v["world_size"], self.name), env_int(env, v["local_world_size"], self.name)
        return Layout(
            launcher=self.name,
            rank=env_int(env, v["rank"], self.name),
            local_rank=env_int(env, v["local_rank"], self.name),
            world_size=world,
            local_world_size=local_world,
            node_rank=env_int(env, v["node_rank"], self.name),
            num_nodes=world // local_world,
            master_addr=env.get(v["master_addr"], "127.0.0.1"),
            master_port=env_int(env, v["master_port"], self.name),
            job_id=env.get(v["job_id"]),
        )

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        from lightning.fabric.plugins.environments import TorchElasticEnvironment

        return TorchElasticEnvironment()

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        if plan.nodes != 1:
            raise LaunchError(
                f"torchrun from snakeddp.launch starts processes on this machine only, but launch.nodes={plan.nodes}. "
                "HINT: use the slurm or azureml profile for multi-node runs, or run torchrun on each node by "
                "hand as shown in `python -m snakeddp.train --help`."
            )
        rendezvous = (
            ["--standalone"]
            if plan.master_port is None
            else ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{plan.master_port}"]
        )
        argv = [
            plan.python,
            "-m",
            "torch.distributed.run",
            "--nnodes=1",
            f"--nproc-per-node={plan.devices}",
            "--max-restarts=0",
            *rendezvous,
            "-m",
            "snakeddp.train",
            *plan.entry,
        ]
        return argv, {}
