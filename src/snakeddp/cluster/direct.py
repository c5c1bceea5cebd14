"""direct: the local profile's launcher. snakeddp starts the N processes of one node itself.

The processes get torchrun's variables from ``snakeddp.cluster.supervisor``, which stops them
all when one fails and passes signals on, as torchrun's agent does on one node. It starts them
without importing torch first: torchrun's agent did, for 1.6-1.9 s before any rank started.
``launch.launcher: torchrun`` still starts them with torchrun.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snakeddp.cluster.base import Launcher, LaunchError, LaunchPlan, Layout

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment


SUPERVISOR = "snakeddp.cluster.supervisor"
LAUNCH_ID = "SNAKEDDP_LAUNCH_ID"  # one per start, like torchrun's TORCHELASTIC_RUN_ID


class Direct(Launcher):
    name = "direct"
    variables = {
        "rank": "RANK",
        "local_rank": "LOCAL_RANK",
        "world_size": "WORLD_SIZE",
        "local_world_size": "LOCAL_WORLD_SIZE",
        "node_rank": "GROUP_RANK",
        "master_addr": "MASTER_ADDR",
        "master_port": "MASTER_PORT",
        "job_id": LAUNCH_ID,
    }

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return LAUNCH_ID in env and "LOCAL_WORLD_SIZE" in env

    def derive(self, values: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        return {**values, "num_nodes": values["world_size"] // values["local_world_size"]}

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        from snakeddp.cluster.environment import StaticEnvironment

        return StaticEnvironment(layout)

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        if plan.nodes != 1:
            raise LaunchError(
                f"direct starts processes on this machine only, but launch.nodes={plan.nodes}. "
                "HINT: use the slurm or azureml profile for multi-node runs."
            )
        port = [] if plan.master_port is None else [f"--master-port={plan.master_port}"]
        argv = [plan.python, "-m", SUPERVISOR, f"--nproc-per-node={plan.devices}", *port, "--"]
        return [*argv, plan.python, "-m", "snakeddp.train", *plan.entry], {}
