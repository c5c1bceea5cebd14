"""The Lightning side of a launcher: a ClusterEnvironment that reports a layout snakeddp resolved,
and the check that Lightning's own environments (torchrun, srun) agree with it.

Imported only by the training processes (it needs Lightning); launching and the workflow do not.
"""

from __future__ import annotations

from lightning.fabric.plugins.environments import ClusterEnvironment

from snakeddp.cluster.base import LaunchError, Layout


class StaticEnvironment(ClusterEnvironment):
    """A Lightning ClusterEnvironment that reports a layout resolved from the launcher's variables."""

    def __init__(self, layout: Layout) -> None:
        super().__init__()
        self.resolved = layout

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return self.resolved.master_addr

    @property
    def main_port(self) -> int:
        if self.resolved.master_port is None:
            raise LaunchError(f"{self.resolved.launcher}: no rendezvous port; set MASTER_PORT or launch.master_port")
        return self.resolved.master_port

    @staticmethod
    def detect() -> bool:
        return False

    def world_size(self) -> int:
        return self.resolved.world_size

    def set_world_size(self, size: int) -> None:
        if size != self.resolved.world_size:
            raise LaunchError(f"Lightning computed world size {size}, the launcher says {self.resolved.world_size}")

    def global_rank(self) -> int:
        return self.resolved.rank

    def set_global_rank(self, rank: int) -> None:
        if rank != self.resolved.rank:
            raise LaunchError(f"Lightning computed rank {rank}, the launcher says {self.resolved.rank}")

    def local_rank(self) -> int:
        return self.resolved.local_rank

    def node_rank(self) -> int:
        return self.resolved.node_rank

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        self.resolved.check_matches(num_nodes, num_devices)


def agreeing(environment: ClusterEnvironment, layout: Layout) -> ClusterEnvironment:
    """``environment``, once it is known to report the ranks of ``layout``.

    Lightning's TorchElasticEnvironment and SLURMEnvironment read the variables themselves;
    snakeddp resolved them from the launcher's table. Two readings that differ would give
    Lightning one process layout and snakeddp's data sharding and checks another.
    """
    theirs = {
        "rank": environment.global_rank(),
        "local_rank": environment.local_rank(),
        "node_rank": environment.node_rank(),
        "world_size": environment.world_size(),
    }
    ours = {name: getattr(layout, name) for name in theirs}
    if theirs != ours:
        raise LaunchError(
            f"{layout.launcher}: Lightning's {type(environment).__name__} sees {theirs}, snakeddp resolved {ours}. "
            "HINT: start training with `python -m snakeddp.launch`, or pass the --launcher that started it."
        )
    return environment
