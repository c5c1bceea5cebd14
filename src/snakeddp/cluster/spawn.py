"""No external launcher: one process, or Lightning spawning its own processes on one node."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from snakeddp.cluster.base import Launcher, LaunchError, LaunchPlan, Layout

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment


class Spawn(Launcher):
    name = "spawn"

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return True

    def __init__(self, devices: int = 1) -> None:
        self.devices = devices

    def layout(self, env: Mapping[str, str]) -> Layout:
        # Lightning starts ``devices`` processes and re-runs this entry point for ranks 1..N-1
        # with LOCAL_RANK set; rank 0 picks the rendezvous port and passes it on.
        local_rank = int(env.get("LOCAL_RANK", 0))
        return Layout(
            launcher=self.name,
            rank=local_rank,
            local_rank=local_rank,
            world_size=self.devices,
            local_world_size=self.devices,
            node_rank=0,
            num_nodes=1,
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else None,
        )

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        from lightning.fabric.plugins.environments import LightningEnvironment

        return LightningEnvironment()

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        if plan.nodes != 1:
            raise LaunchError("spawn starts processes on one node only; use srun, mpirun or AzureML for more nodes")
        return [plan.python, "-m", "snakeddp.train", *plan.entry], {}


def guard_foreign_launch(env: Mapping[str, str]) -> None:
    """Refuse to spawn when another launcher already started several copies of this process.

    Without this, `mpirun -np 2 python -m snakeddp.train` on a config that expects spawning
    trains two independent copies that each write the same files.
    """
    from snakeddp.cluster import LAUNCHERS

    for launcher in LAUNCHERS:
        if launcher is Spawn or not launcher.detect(env):
            continue
        try:
            layout = launcher().layout(env)
        except LaunchError:
            continue
        if layout.world_size > 1:
            raise LaunchError(
                f"this process was started by {launcher.name} as rank {layout.rank} of {layout.world_size}, "
                f"but training was asked to spawn its own processes. HINT: pass --launcher {launcher.name} "
                "(or set launch.launcher) so the ranks are used instead of duplicated."
            )
    if os.environ.get("LOCAL_RANK") and "MASTER_PORT" not in env:
        raise LaunchError("LOCAL_RANK is set but MASTER_PORT is not: ranks would not find each other")
