"""direct: the local profile's launcher. snakeddp starts the N processes of one node itself.

The processes get torchrun's variables from ``snakeddp.cluster.supervisor``, which stops them
all when one fails and passes signals on, as torchrun's agent does on one node. It imports the
ranks' modules once and forks every rank from itself (``snakeddp.cluster.warm``; off with
SNAKEDDP_WARM_START=0), where torchrun's agent imported torch for itself (1.6-1.9 s before any
rank started) and then every rank imported it again. ``launch.launcher: torchrun`` still starts
them with torchrun.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from snakeddp.cluster.base import LaunchError, LaunchPlan, Layout, multi_node_hint
from snakeddp.cluster.torchrun import TorchRun
from snakeddp.cluster.warm import enabled as fork_ranks

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment


SUPERVISOR = "snakeddp.cluster.supervisor"
LAUNCH_ID = "SNAKEDDP_LAUNCH_ID"  # one per start, like torchrun's TORCHELASTIC_RUN_ID


class Direct(TorchRun):
    """torchrun's variables and layout, set by snakeddp's supervisor, which names itself by its launch id."""

    name = "direct"
    variables = {**TorchRun.variables, "job_id": LAUNCH_ID}
    own_session = True  # the supervisor passes every signal on to the ranks itself

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return LAUNCH_ID in env and "LOCAL_WORLD_SIZE" in env

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        from snakeddp.cluster.environment import StaticEnvironment

        return StaticEnvironment(layout)

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        if plan.nodes != 1:
            raise LaunchError(
                f"direct starts processes on this machine only, but launch.nodes={plan.nodes}. {multi_node_hint()}."
            )
        port = [] if plan.master_port is None else [f"--master-port={plan.master_port}"]
        fork = ["--fork-ranks"] if fork_ranks(env) else []
        argv = [plan.python, "-m", SUPERVISOR, f"--nproc-per-node={plan.devices}", *port, *fork, "--"]
        return [*argv, plan.python, "-m", "snakeddp.train", *plan.entry], {}
