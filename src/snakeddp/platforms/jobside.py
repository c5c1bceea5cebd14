"""What a platform's jobs and ranks see of it: the job side, beside the workflow side (``contract``).

A rank, a launcher or a provenance record asks about "the platform this process runs on" without
naming one: the registry (``snakeddp.platforms``) asks each row's job side. A job side is light (it
imports no launcher, no SDK, no torch): ranks and the Snakefile import every platform's. Its launchers
are named as ``module:Class`` and imported only when one is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Allocation(Protocol):
    """A job of a platform's scheduler that mpirun runs inside (Slurm's allocation): where its nodes are,
    how mpirun's daemons start on them, and what every rank must agree on."""

    def rendezvous(self, env: Mapping[str, str]) -> tuple[str, int]:
        """The address and port of rank 0's node, as every task of the job derives them."""
        ...

    def exports(self, plan: Any, env: Mapping[str, str]) -> dict[str, str]:
        """What every rank of ``plan`` (snakeddp.cluster.base.LaunchPlan) is given to meet (MASTER_ADDR...)."""
        ...

    def mpirun_options(self, plan: Any, major: int) -> list[str]:
        """mpirun's options that start its daemons inside the job, for Open MPI ``major``."""
        ...

    def mpirun_env(self, plan: Any, env: Mapping[str, str]) -> dict[str, str]:
        """What mpirun itself needs of the job's variables where the job's own set-up removed them."""
        ...

    def node_of(self, rank: int, per_node: int, env: Mapping[str, str]) -> str | None:
        """The node ``rank`` runs on, where the scheduler says."""
        ...


class JobSide:
    """One platform's job side. Every attribute has a default: a platform overrides what it has."""

    #: Variables its jobs set that provenance records (an allow-list: a variable not named anywhere is not
    #: recorded, whatever it holds: a site's tokens stay out).
    recorded: frozenset[str] = frozenset()
    #: Variables naming the node a rank runs on as its scheduler calls it, first set wins.
    node_variables: tuple[str, ...] = ()
    #: Variables naming the job a rank runs in, first set wins.
    job_id_variables: tuple[str, ...] = ()
    #: Variables giving the number of nodes of the job, first set wins.
    node_count_variables: tuple[str, ...] = ()
    #: Launchers only it runs: name -> ``module:Class`` (a snakeddp.cluster.base.Launcher subclass).
    launchers: Mapping[str, str] = {}
    #: A run may span more than one node here (a HINT on a one-node platform names these).
    multi_node: bool = False

    def allocation(self, env: Mapping[str, str]) -> Allocation | None:
        """This process's job of the platform's scheduler, which mpirun can run inside; None outside one."""
        return None

    def rendezvous(self, env: Mapping[str, str]) -> tuple[str | None, int | None]:
        """Rank 0's address and port where the platform exports them to every process of a job."""
        return None, None

    def placement(self, env: Mapping[str, str]) -> dict[str, Any] | None:
        """Where the platform placed this rank beyond its host (a Spark task's executor), for provenance's
        ranks[].executor; None where it says nothing."""
        return None

    def launch_record(self, env: Mapping[str, str], ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
        """What provenance's launch section records of the platform's run (under the platform's name), from
        rank 0's environment and every rank's record; None where the run did not run there."""
        return None
