"""srun inside a Slurm allocation: every task is one rank (Lightning's SLURMEnvironment).

A rule run by snakemake-executor-plugin-slurm sees an allocation whose SLURM_* variables the
jobstep plugin has removed (all but SLURM_JOB_ID and a few others, SLURM_CONF included). srun
only needs SLURM_JOB_ID to start a step inside it; everything else a launch needs (the config
file, the node list, the address of the first node) is restored from SNAKEDDP_SLURM_CONF or
asked from Slurm itself with ``scontrol``. ``SlurmAllocation`` is what mpirun asks of the allocation it
runs inside. Found by snakeddp.cluster through the platform's job side (``snakeddp.slurm.jobside``).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snakeddp.cluster.base import Launcher, LaunchError, LaunchPlan, Layout
from snakeddp.slurm import SLURM_CONF_COPY

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment

_FIELD = re.compile(r"(\S+?)=(\S*)")
_BRACKETS = re.compile(r"\[([^\]]*)\]")


def first_node(env: Mapping[str, str]) -> str:
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise LaunchError("slurm: no SLURM_JOB_NODELIST to find the first node; set MASTER_ADDR")
    return root_node(nodelist)


def root_node(nodelist: str) -> str:
    """The first node of a Slurm node list (``gpu[07-08,12],cpu01`` is ``gpu07``), the one Lightning's
    SLURMEnvironment picks. Read here rather than by importing Lightning: that import was 2.4 s of CPU in every
    Slurm job's launcher, which starts no rank itself."""
    first, depth = nodelist.split(" ")[0], 0
    for at, char in enumerate(first):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            first = first[:at]
            break
    return _BRACKETS.sub(lambda ranges: re.split("[,-]", ranges.group(1))[0], first)


def job_port(env: Mapping[str, str]) -> int:
    """The port Lightning's SLURMEnvironment derives from the job id, so every task agrees without talking."""
    job_id = env.get("SLURM_JOB_ID")
    return 15000 + int(job_id[-4:]) if job_id and job_id.isdigit() else 12910


def client_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with SLURM_CONF put back when the jobstep plugin removed it (no-op with /etc/slurm)."""
    restored = dict(env)
    if not restored.get("SLURM_CONF") and restored.get(SLURM_CONF_COPY):
        restored["SLURM_CONF"] = restored[SLURM_CONF_COPY]
    return restored


def scontrol_show(kind: str, name: str, env: Mapping[str, str]) -> dict[str, str]:
    """``scontrol show <kind> <name>`` as a dict of its KEY=VALUE fields."""
    argv = ["scontrol", "--oneliner", "show", kind, name]
    try:
        done = subprocess.run(argv, env=client_env(env), capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LaunchError(f"slurm: `{' '.join(argv)}` failed: {error}") from None
    if done.returncode != 0:
        raise LaunchError(
            f"slurm: `{' '.join(argv)}` failed: {done.stderr.strip()}. HINT: run inside the allocation with "
            f"SLURM_CONF (or {SLURM_CONF_COPY}) pointing at the cluster's slurm.conf."
        )
    return dict(_FIELD.findall(done.stdout))


def job_nodelist(env: Mapping[str, str]) -> str:
    """The allocation's nodes in Slurm's compressed form, e.g. ``gpu[07-08]``."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    return nodelist or scontrol_show("job", env["SLURM_JOB_ID"], env)["NodeList"]


def hostnames(nodelist: str, env: Mapping[str, str]) -> list[str]:
    """A Slurm node list (``gpu[07-08]``) as its node names, in Slurm's order; none for ``(null)`` or ''."""
    if not nodelist or nodelist == "(null)":
        return []
    argv = ["scontrol", "show", "hostnames", nodelist]
    try:
        done = subprocess.run(argv, env=client_env(env), capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LaunchError(f"slurm: `{' '.join(argv)}` failed: {error}") from None
    if done.returncode != 0:
        raise LaunchError(f"slurm: `{' '.join(argv)}` failed: {done.stderr.strip()}")
    return done.stdout.split()


def node_of_rank(rank: int, per_node: int, env: Mapping[str, str]) -> str | None:
    """The node of the allocation ``rank`` runs on: tasks fill the job's nodes in order, ``per_node`` each
    (srun's --ntasks-per-node, mpirun's ppr:N:node); None where Slurm does not say."""
    try:
        nodes = hostnames(job_nodelist(env), env)
    except (LaunchError, KeyError):
        return None
    index = rank // per_node
    return nodes[index] if index < len(nodes) else None


def node_address(node: str, env: Mapping[str, str]) -> str:
    """The address Slurm reaches ``node`` at (its NodeAddr): what rank 0's peers connect to."""
    return scontrol_show("node", node, env).get("NodeAddr") or node


def rendezvous_exports(plan: LaunchPlan, env: Mapping[str, str]) -> dict[str, str]:
    """MASTER_ADDR/MASTER_PORT every rank of a job agrees on, plus SLURM_CONF for srun/mpirun.

    Rank 0 runs on the first node of the allocation; its NodeAddr is used rather than its name
    because node names need not resolve (the second node of tests/slurm/cluster.sh does not).
    """
    restored = client_env(env)
    exports = {"SLURM_CONF": restored["SLURM_CONF"]} if restored.get("SLURM_CONF") != env.get("SLURM_CONF") else {}
    addr = env.get("MASTER_ADDR") or node_address(root_node(job_nodelist(env)), env)
    port = plan.master_port or (int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else job_port(env))
    return {**exports, "MASTER_ADDR": addr, "MASTER_PORT": str(port)}


class Srun(Launcher):
    name = "srun"
    variables = {
        "rank": "SLURM_PROCID",
        "local_rank": "SLURM_LOCALID",
        "world_size": "SLURM_NTASKS",
        "node_rank": "SLURM_NODEID",
        "num_nodes": "SLURM_NNODES",
        "job_id": "SLURM_JOB_ID",
        "master_addr": "MASTER_ADDR",
        "master_port": "MASTER_PORT",
    }
    # Set by snakeddp.launch (rendezvous_exports); by hand, derived as Lightning's SLURMEnvironment does.
    optional = {"job_id": None, "master_addr": None, "master_port": None}
    # mpirun inside an allocation also sees SLURM_* variables: mpirun is asked first.
    detect_before = "env"

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        # SLURM_STEP_ID separates tasks of an srun step from the batch script that holds the allocation.
        return "SLURM_PROCID" in env and "SLURM_NTASKS" in env and env.get("SLURM_STEP_ID", "batch").isdigit()

    def derive(self, values: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        # SLURM_NTASKS_PER_NODE may be a pattern such as "2(x2)"; then the tasks split evenly.
        per_node = env.get("SLURM_NTASKS_PER_NODE")
        local_world = (
            int(per_node) if per_node and per_node.isdigit() else values["world_size"] // max(values["num_nodes"], 1)
        )
        return {
            **values,
            "local_world_size": local_world,
            "master_addr": values["master_addr"] or first_node(env),
            "master_port": values["master_port"] if values["master_port"] is not None else job_port(env),
        }

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        # Preemption is handled by snakeddp's own callback (save last.ckpt, exit 75), not by
        # Lightning's requeue, so the workflow manager decides what runs next.
        from lightning.fabric.plugins.environments import SLURMEnvironment

        from snakeddp.cluster.environment import agreeing

        return agreeing(SLURMEnvironment(auto_requeue=False), layout)

    def node_of(self, rank: int, layout: Layout, env: Mapping[str, str]) -> str | None:
        return node_of_rank(rank, layout.local_world_size, env)

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """One step whose tasks are the ranks: Slurm's signals (``--signal``, ``scancel``) reach every rank."""
        argv = [
            "srun",
            f"--nodes={plan.nodes}",
            f"--ntasks={plan.world_size}",
            f"--ntasks-per-node={plan.devices}",
            # The job's own per-task CPUs: a step asking for fewer would confine each rank to them.
            f"--cpus-per-task={plan.cpus_per_task}",
            "--kill-on-bad-exit=1",
            "--export=ALL",
        ]
        if plan.gpus:
            # Every task sees its node's GPUs and Lightning picks cuda:<local rank>; a per-task
            # binding (--gpus-per-task) would leave ranks > 0 without the device they expect.
            argv.append(f"--gres=gpu:{plan.devices}")
        # Outside an allocation srun makes its own, whose nodes are only known to the tasks.
        exports = rendezvous_exports(plan, env) if env.get("SLURM_JOB_ID") else {}
        return [*argv, plan.python, "-m", "snakeddp.train", *plan.entry], exports


class SlurmAllocation:
    """The allocation mpirun runs inside (snakeddp.platforms.jobside.Allocation).

    Inside Slurm, mpirun (OpenMPI 4) starts its daemons with srun, but by default runs the ranks of
    its own node itself, outside any job step, where Slurm's warning signals (``--signal``,
    ``scancel --signal``) never arrive. ``ras_base_launch_orted_on_hn`` puts a daemon on that node
    too, so every rank lives in a step and is signalled; mpirun itself also forwards SIGUSR1/2.
    That srun step asks for nothing but one daemon per node, so ``plm_slurm_args`` gives it what its
    ranks were allocated: their CPUs (a one-CPU step confines every rank of the node to that core
    where Slurm uses cgroups) and the node's GPUs, which a step without ``--gres`` does not get
    where the site's Slurm gives steps no GRES by default. Both parameters keep their names in OpenMPI 5's
    PRRTE, set with ``--prtemca`` there (snakeddp.cluster.mpi says why the major version picks the option).
    """

    def rendezvous(self, env: Mapping[str, str]) -> tuple[str, int]:
        return first_node(env), job_port(env)

    def exports(self, plan: LaunchPlan, env: Mapping[str, str]) -> dict[str, str]:
        return rendezvous_exports(plan, env)

    def mpirun_options(self, plan: LaunchPlan, major: int) -> list[str]:
        """Where Slurm starts the daemons: one on mpirun's node too, each step with its ranks' CPUs and
        GPUs; spelled for OpenMPI ``major``'s runtime (ORTE's ``--mca`` to 4, PRRTE's ``--prtemca`` from 5)."""
        option = "--prtemca" if major >= 5 else "--mca"
        return [option, "ras_base_launch_orted_on_hn", "1", option, "plm_slurm_args", self.daemon_step(plan)]

    @staticmethod
    def daemon_step(plan: LaunchPlan) -> str:
        """srun options of the daemons' step (one task per node): the CPUs and GPUs of the node's ranks."""
        options = [f"--cpus-per-task={plan.devices * plan.cpus_per_task}"]
        if plan.gpus:
            options.append(f"--gres=gpu:{plan.devices}")
        return " ".join(options)

    def mpirun_env(self, plan: LaunchPlan, env: Mapping[str, str]) -> dict[str, str]:
        """The allocation variables OpenMPI reads (ras_slurm), when the jobstep plugin removed them."""
        if env.get("SLURM_NODELIST") and env.get("SLURM_TASKS_PER_NODE"):
            return {}
        return {"SLURM_NODELIST": job_nodelist(env), "SLURM_TASKS_PER_NODE": f"{plan.devices}(x{plan.nodes})"}

    def node_of(self, rank: int, per_node: int, env: Mapping[str, str]) -> str | None:
        return node_of_rank(rank, per_node, env)
