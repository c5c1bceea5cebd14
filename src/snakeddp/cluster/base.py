"""What every launcher shares: the canonical layout of a process and the Lightning adapter for it.

A launcher knows three things: whether this process was started by it (``detect``), how its
environment variables map to the canonical ranks Lightning needs (``layout``), and how to start
the processes of a run (``command``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from snakeddp import platforms
from snakeddp.errors import LaunchError

if TYPE_CHECKING:  # launching needs no Lightning; only the training processes import it
    from lightning.fabric.plugins.environments import ClusterEnvironment


@dataclass(frozen=True)
class Layout:
    """Where one process sits in a run: the values Lightning's DDP needs, and who said so."""

    launcher: str
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int | None
    job_id: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise LaunchError(f"{self.launcher}: rank {self.rank} is outside world size {self.world_size}")
        if not 0 <= self.local_rank < self.local_world_size:
            raise LaunchError(
                f"{self.launcher}: local rank {self.local_rank} is outside {self.local_world_size} processes per node"
            )
        if self.num_nodes * self.local_world_size != self.world_size:
            raise LaunchError(
                f"{self.launcher}: {self.world_size} processes cannot be {self.num_nodes} nodes x "
                f"{self.local_world_size} processes; snakeddp needs the same number of processes on every node"
            )

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def check_matches(self, nodes: int, devices: int, *, ranks_only: bool = False) -> None:
        """Refuse to train when the launched processes are not the layout the run config asks for
        (``ranks_only``: where the platform places every rank itself, only their number)."""
        started: object = (self.num_nodes, self.local_world_size)
        asked: object = (nodes, devices)
        if ranks_only:
            started, asked = self.world_size, nodes * devices
        if started != asked:
            raise LaunchError(
                f"{self.launcher} started {self.num_nodes} node(s) x {self.local_world_size} process(es), "
                f"but the run config asks for launch.nodes={nodes} x launch.devices={devices}. "
                "HINT: start the processes with `python -m snakeddp.launch`, which builds the command "
                "from the config, or make the config match the allocation."
            )


@dataclass(frozen=True)
class LaunchPlan:
    """What a launcher needs to build the command that starts every process of a run."""

    nodes: int
    devices: int
    threads_per_process: int
    master_port: int | None
    python: str
    entry: tuple[str, ...]
    gpus: bool = False
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: CPU cores the scheduler reserved for each process (site.cpus_per_gpu on GPUs, which leaves
    #: NCCL's proxy and the prefetch thread cores of their own); None: its threads.
    cpus_per_process: int | None = None
    #: How long a rendezvous of the launcher's own may wait for every node (launch.hang_timeout's longest
    #: wait, snakeddp.cluster.hang); None: the launcher's default.
    join_timeout_s: int | None = None

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices

    @property
    def cpus_per_task(self) -> int:
        return self.cpus_per_process or self.threads_per_process


# Layout fields that are text; every other one is an integer.
TEXT_FIELDS = frozenset({"master_addr", "job_id"})


def env_int(env: Mapping[str, str], name: str, launcher: str) -> int:
    value = env.get(name)
    if value is None:
        raise LaunchError(
            f"{launcher}: environment variable {name} is not set, so this process cannot know its rank. "
            f"HINT: start training with {launcher} as `python -m snakeddp.launch` does, or pick the "
            "launcher that started this process with --launcher."
        )
    try:
        return int(value)
    except ValueError:
        raise LaunchError(f"{launcher}: {name}={value!r} is not an integer") from None


def split_host_port(value: str) -> tuple[str, int | None]:
    """'10.0.0.4:6105' -> ('10.0.0.4', 6105); 'host' -> ('host', None)."""
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and host:
        return host, int(port)
    return value, None


def multi_node_hint() -> str:
    """Where a launcher that starts one node's processes sends a run of more: the platforms that run more."""
    return f"HINT: use the {' or '.join(platforms.multi_node())} profile for multi-node runs"


def quote(argv: list[str]) -> str:
    return shlex.join(argv)


class Launcher:
    """One way of starting training processes. Subclasses fill the class attributes."""

    name: ClassVar[str]
    #: Canonical Layout field -> the environment variable it is read from (submitit's table).
    variables: ClassVar[dict[str, str]] = {}
    #: Fields whose variable may be unset, and their value then (None: ``derive`` supplies it).
    optional: ClassVar[dict[str, Any]] = {}
    #: Start the command in a session of its own, so that signals reach it only through
    #: snakeddp.launch, once (a terminal's Ctrl-C would otherwise reach it twice).
    own_session: ClassVar[bool] = False
    #: The platform puts each rank where it likes (a Spark task on any executor): the run config's
    #: nodes x devices is only the number of ranks, and Lightning is given the layout they landed in.
    places_ranks: ClassVar[bool] = False
    #: A platform's launcher (snakeddp.platforms.jobside): asked before this generic one, whose variables
    #: its processes also see (torchrun's under a Spark task, mpirun's inside a Slurm allocation).
    detect_before: ClassVar[str | None] = None

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        raise NotImplementedError

    def layout(self, env: Mapping[str, str]) -> Layout:
        """This process's layout: every field the table names, read once, the rest from ``derive``."""
        values: dict[str, Any] = {}
        for name, var in self.variables.items():
            if not env.get(var) and name in self.optional:  # unset or empty
                values[name] = self.optional[name]
            else:
                values[name] = env.get(var) if name in TEXT_FIELDS else env_int(env, var, self.name)
        return Layout(launcher=self.name, **self.derive(values, env))

    def derive(self, values: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        """The fields the launcher does not export directly, from those it does (none by default)."""
        return values

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        """The ClusterEnvironment Lightning's strategy runs on (imported lazily: launching needs no Lightning)."""
        raise NotImplementedError

    def node_of(self, rank: int, layout: Layout, env: Mapping[str, str]) -> str | None:
        """The scheduler's name of the node ``rank`` was placed on, where the launcher knows it without that
        rank (the ranks' meeting names the nodes of ranks that never came); None where it does not."""
        return None

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """The argv that starts every process of the run, and variables to add to its environment."""
        raise LaunchError(f"{self.name} processes are started by the platform, not by snakeddp.launch")
