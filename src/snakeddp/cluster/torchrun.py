"""torchrun (torch.distributed.run): the local profile's launcher, one node, N processes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snakeddp.cluster.base import Launcher, LaunchError, LaunchPlan, Layout, multi_node_hint

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment


class TorchRun(Launcher):
    name = "torchrun"
    # Signals reach its agent through snakeddp.launch only. In the launcher's process group, a closed terminal's
    # SIGHUP reached the agent too, which ended its workers with SIGHUP (torch.distributed.elastic's
    # SignalException) before the SIGTERM the launcher sends them for it could save (its workers are in sessions
    # of their own already); a Ctrl-C reached it twice. Its agent dies with the launcher (snakeddp.cluster.agent).
    own_session = True
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

    optional = {"master_addr": "127.0.0.1", "job_id": None}

    def derive(self, values: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        return {**values, "num_nodes": values["world_size"] // values["local_world_size"]}

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        from lightning.fabric.plugins.environments import TorchElasticEnvironment

        from snakeddp.cluster.environment import agreeing

        return agreeing(TorchElasticEnvironment(), layout)

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        if plan.nodes != 1:
            raise LaunchError(
                f"torchrun from snakeddp.launch starts processes on this machine only, but launch.nodes={plan.nodes}. "
                f"{multi_node_hint()}, or run torchrun on each node by hand as shown in "
                "`python -m snakeddp.train --help`."
            )
        rendezvous = (
            ["--standalone"]
            if plan.master_port is None
            else ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{plan.master_port}"]
        )
        if plan.join_timeout_s is not None:  # the agents' wait for each other (torchrun's default: 600 s)
            rendezvous.append(f"--rdzv-conf=join_timeout={plan.join_timeout_s}")
        # torchrun itself, run by a module that spares it Python's final garbage collection.
        argv = [
            plan.python,
            "-m",
            "snakeddp.cluster.agent",
            "--nnodes=1",
            f"--nproc-per-node={plan.devices}",
            "--max-restarts=0",
            *rendezvous,
            "-m",
            "snakeddp.train",
            *plan.entry,
        ]
        return argv, {}
