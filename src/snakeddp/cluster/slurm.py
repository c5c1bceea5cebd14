"""srun inside a Slurm allocation: every task is one rank (Lightning's SLURMEnvironment)."""

from __future__ import annotations

from collections.abc import Mapping

from lightning.fabric.plugins.environments import ClusterEnvironment, SLURMEnvironment

from snakeddp.cluster.base import Launcher, LaunchError, LaunchPlan, Layout, env_int


def first_node(env: Mapping[str, str]) -> str:
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise LaunchError("slurm: no SLURM_JOB_NODELIST to find the first node; set MASTER_ADDR")
    return SLURMEnvironment.resolve_root_node_address(nodelist)


def job_port(env: Mapping[str, str]) -> int:
    """The port Lightning's SLURMEnvironment derives from the job id, so every task agrees without talking."""
    job_id = env.get("SLURM_JOB_ID")
    return 15000 + int(job_id[-4:]) if job_id and job_id.isdigit() else 12910


class Srun(Launcher):
    name = "srun"
    variables = {
        "rank": "SLURM_PROCID",
        "local_rank": "SLURM_LOCALID",
        "world_size": "SLURM_NTASKS",
        "node_rank": "SLURM_NODEID",
        "num_nodes": "SLURM_NNODES",
        "job_id": "SLURM_JOB_ID",
    }

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        # SLURM_STEP_ID separates tasks of an srun step from the batch script that holds the allocation.
        return "SLURM_PROCID" in env and "SLURM_NTASKS" in env and env.get("SLURM_STEP_ID", "batch").isdigit()

    def layout(self, env: Mapping[str, str]) -> Layout:
        v = self.variables
        world, nodes = env_int(env, v["world_size"], self.name), env_int(env, v["num_nodes"], self.name)
        per_node = env.get("SLURM_NTASKS_PER_NODE")
        local_world = int(per_node) if per_node and per_node.isdigit() else world // max(nodes, 1)
        return Layout(
            launcher=self.name,
            rank=env_int(env, v["rank"], self.name),
            local_rank=env_int(env, v["local_rank"], self.name),
            world_size=world,
            local_world_size=local_world,
            node_rank=env_int(env, v["node_rank"], self.name),
            num_nodes=nodes,
            master_addr=env.get("MASTER_ADDR") or first_node(env),
            master_port=int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else job_port(env),
            job_id=env.get(v["job_id"]),
        )

    def lightning_environment(self, layout: Layout) -> ClusterEnvironment:
        # Preemption is handled by snakeddp's own callback (save last.ckpt, exit 75), not by
        # Lightning's requeue, so the workflow manager decides what runs next.
        return SLURMEnvironment(auto_requeue=False)

    def command(self, plan: LaunchPlan, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        argv = [
            "srun",
            f"--nodes={plan.nodes}",
            f"--ntasks={plan.world_size}",
            f"--ntasks-per-node={plan.devices}",
            f"--cpus-per-task={plan.threads_per_process}",
            "--kill-on-bad-exit=1",
            "--export=ALL",
        ]
        if plan.gpus:
            argv.append("--gpus-per-task=1")
        return [*argv, plan.python, "-m", "snakeddp.train", *plan.entry], {}
