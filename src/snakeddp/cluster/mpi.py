"""OpenMPI's mpirun, on this machine or inside a scheduler's job (a Slurm allocation, AzureML's MPI distribution).

Ranks come from OMPI_COMM_WORLD_* (no mpi4py needed). The rendezvous address comes from, in
order: MASTER_ADDR; what the platform this process runs on exports (snakeddp.platforms.rendezvous: rank 0's
node of an AzureML job or a Slurm allocation); localhost for a single node: started by
snakeddp.launch with no rendezvous named, on a free port the launcher holds while the ranks run (a
fixed one made two runs on one machine fail with EADDRINUSE); started by hand with no MASTER_PORT, on
29500. Inside a scheduler's job (snakeddp.platforms.allocation), its allocation says how mpirun's
daemons start on its nodes, so that every rank lives where the scheduler's signals reach it.

OpenMPI 5 moved mpirun's runtime to PRRTE. Both parameters keep their names there (``prte_info
--param plm:slurm`` and ``ras:base`` of Debian trixie's OpenMPI 5.0.7 / PRRTE 3.0.8) but are PRRTE's,
set with ``--prtemca``: mpirun 5 also guesses them from ``--mca``, which its manual advises against,
and mpirun 4 refuses ``--prtemca`` ("unknown option"). So the installed mpirun's major version
(``mpirun --version``, asked once per process) picks the option. Everything else passed (``-np``,
``--map-by ppr:N:node``, ``--bind-to``, ``--oversubscribe``, ``-x``) means the same to both.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snakeddp import platforms
from snakeddp.cluster.base import Launcher, LaunchError, LaunchPlan, Layout, multi_node_hint

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment

DEFAULT_PORT = 29500
# The ports this process holds for the single-node runs it started (bound, not listening; see
# cluster.supervisor.reserve_port): kept until the process ends, after its ranks.
_HELD: list[socket.socket] = []
# `mpirun --version`: "mpirun (Open MPI) 4.1.4" from OpenMPI 4, "mpirun (Open MPI) 5.0.7" from 5.
OPENMPI_VERSION = re.compile(r"\(Open MPI\) (?P<major>\d+)\.\d+")


def openmpi_major(version_output: str, mpirun: str = "mpirun") -> int:
    """The major version in ``mpirun --version``'s output; a LaunchError when it is no Open MPI's."""
    match = OPENMPI_VERSION.search(version_output)
    if match is None:
        said = version_output.strip().splitlines()
        raise LaunchError(
            f"mpirun: {mpirun} is not Open MPI's (`{mpirun} --version` says {said[0] if said else 'nothing'!r}), "
            "and the mpirun launcher reads Open MPI's rank variables. HINT: put Open MPI's bin directory first "
            "on PATH (module load openmpi; Debian: apt-get install openmpi-bin), or set launch.launcher: srun."
        )
    return int(match["major"])


@functools.cache
def installed_major(mpirun: str) -> int:
    """The Open MPI major version of the executable ``mpirun`` (a path), asked without starting a job."""
    try:
        done = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LaunchError(
            f"mpirun: `{mpirun} --version` failed ({error}). HINT: check the OpenMPI installation, or set "
            "launch.launcher: srun."
        ) from None
    return openmpi_major(done.stdout + done.stderr, mpirun)


def named_rendezvous(env: Mapping[str, str]) -> bool:
    """Whether the user (MASTER_ADDR, MASTER_PORT) or the platform this process runs on names rank 0's address."""
    return bool(env.get("MASTER_ADDR") or env.get("MASTER_PORT")) or platforms.rendezvous(env) != (None, None)


def held_free_port() -> int:
    """A free port for rank 0's store on this machine, held by this process while it lives."""
    from snakeddp.cluster.supervisor import reserve_port

    _HELD.append(reserve_port())
    return _HELD[-1].getsockname()[1]


class MpiRun(Launcher):
    name = "mpirun"
    variables = {
        "rank": "OMPI_COMM_WORLD_RANK",
        "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK",
        "world_size": "OMPI_COMM_WORLD_SIZE",
        "local_world_size": "OMPI_COMM_WORLD_LOCAL_SIZE",
    }

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env

    @staticmethod
    def rendezvous(env: Mapping[str, str], num_nodes: int) -> tuple[str, int | None]:
        addr, port = platforms.rendezvous(env)
        addr = env.get("MASTER_ADDR") or addr
        if addr is None:
            if num_nodes > 1:
                raise LaunchError(
                    "mpirun: a multi-node run needs the address of rank 0's node. HINT: export MASTER_ADDR "
                    f"(and MASTER_PORT) with mpirun -x, or run on the {' or '.join(platforms.multi_node())} "
                    "platform, which provides it."
                )
            addr = "127.0.0.1"
        if env.get("MASTER_PORT"):
            port = int(env["MASTER_PORT"])
        return addr, port or DEFAULT_PORT

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        from snakeddp.cluster.environment import StaticEnvironment

        return StaticEnvironment(layout)

    def derive(self, values: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        world, local_world, rank = values["world_size"], values["local_world_size"], values["rank"]
        if world % local_world:
            raise LaunchError(
                f"mpirun: {world} ranks do not split evenly into nodes of {local_world}; use --map-by ppr:N:node"
            )
        num_nodes = world // local_world
        addr, port = self.rendezvous(env, num_nodes)
        return {
            **values,
            # With ppr:N:node mapping, ranks fill nodes in order, so the node is rank // N.
            "node_rank": rank // local_world,
            "num_nodes": num_nodes,
            "master_addr": addr,
            "master_port": port,
            "job_id": platforms.job_id(env) or env.get("OMPI_MCA_ess_base_jobid"),
        }

    def node_of(self, rank: int, layout: Layout, env: Mapping[str, str]) -> str | None:
        allocation = platforms.allocation(env)
        return allocation.node_of(rank, layout.local_world_size, env) if allocation else None

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        allocation = platforms.allocation(env)
        if plan.nodes > 1 and allocation is None:
            raise LaunchError(
                f"mpirun: launch.nodes={plan.nodes} needs a host list; run it inside a scheduler's job. "
                f"{multi_node_hint()}."
            )
        argv = ["mpirun", "-np", str(plan.world_size), "--map-by", f"ppr:{plan.devices}:node", "--bind-to", "none"]
        if allocation is not None:
            rank_env = allocation.exports(plan, env)
            argv += allocation.mpirun_options(plan, installed_major(self.executable(env)))
            process_env = allocation.mpirun_env(plan, env)
        else:
            addr, port = self.rendezvous(env, plan.nodes)
            if plan.master_port:
                port = plan.master_port
            elif plan.nodes == 1 and not named_rendezvous(env):
                port = held_free_port()
            rank_env, process_env = {"MASTER_ADDR": addr, "MASTER_PORT": str(port)}, {}
            if plan.devices > (os.cpu_count() or 1):
                argv.append("--oversubscribe")
        rank_env = {**rank_env, **plan.extra_env}
        # OMP_NUM_THREADS is set by snakeddp.launch for every launcher.
        inherited = {name for name in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH") if name in env}
        for name in sorted({*rank_env, *inherited, "OMP_NUM_THREADS"}):
            argv += ["-x", name]
        return [*argv, plan.python, "-m", "snakeddp.train", *plan.entry], {**process_env, **rank_env}

    @staticmethod
    def executable(env: Mapping[str, str]) -> str:
        """The mpirun the command will start: the first on the job's PATH."""
        found = shutil.which("mpirun", path=env.get("PATH"))
        if found is None:
            raise LaunchError(
                "mpirun: no mpirun on PATH. HINT: install OpenMPI on the nodes that run the train jobs (Debian: "
                "apt-get install openmpi-bin) or load the site's module (module load openmpi) before snakemake, "
                "or set launch.launcher: srun."
            )
        return found
