"""The one-time Databricks Jobs run (``jobs/runs/submit``) that trains one snakeddp run, built from
databricks-sdk's own request classes.

One task runs the remote jobs' entry (snakeddp.remote.entry, from the code snapshot) on the cluster's driver
(``spark_python_task``): it seeds the run's folder from the staged attempt, then starts the run's ranks
through TorchDistributor on the cluster's executors (the spark platform); the code, run.yaml, the data
manifest and the attempt to resume are staged under ``databricks.stage`` (a Unity Catalog volume or a
workspace folder) first, and the run directory is copied back from there into results/runs/<run>/.
The SDK's ``from_dict`` and constructors validate nothing (a missing field becomes None), so
``check`` refuses what the Jobs API would reject only after an upload and a queue, in one line each.
Imported only by the submitter: databricks-sdk is an optional extra.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snakeddp import platforms
from snakeddp.config import parts
from snakeddp.databricks import PLATFORM
from snakeddp.databricks.settings import Settings
from snakeddp.errors import ConfigError
from snakeddp.remote.folder import ENTRY
from snakeddp.run.layout import RUN_FILE
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.redact import scrub

ENVIRONMENT_FILE = "environment.json"
# A barrier stage that cannot get every task a slot waits 15 s x 40 checks by default (about 10
# minutes) before it fails: fail in seconds instead, with the run's own one line.
BARRIER_CHECKS = {
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "2s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "5",
}
# A GPU run's cluster: a GPU ML runtime (16.4.x-gpu-ml-scala2.12: CUDA, NCCL and torch built for them)
# on GPU nodes, Databricks' "GPU-enabled compute" rule. Whether a node type has GPUs is the workspace's to
# say (its node types' num_gpus: snakeddp.databricks.nodes), not a pattern of names the clouds keep adding to.
GPU_RUNTIME = re.compile(r"-gpu-ml-")
RUNTIME_VERSION = re.compile(r"^(?P<version>\d+\.\d+\.x)-(?:.*-)?(?P<scala>scala\d+\.\d+)$")


class DatabricksSpecError(ConfigError):
    """A job spec the Jobs API would refuse; the message names the field and how to set it."""


@dataclass(frozen=True)
class JobPlan:
    """What one run's job needs, in snakeddp's terms."""

    run_id: str
    nodes: int
    devices: int
    gpu: bool
    stage: str
    """The run's files on Databricks: code/, and results/ laid out as the workflow's own, so the paths
    its provenance records (relative to where it ran) read the same here."""
    manifest: str
    """The data manifest's path below ``stage`` (results/data/<dataset>/manifest-N.json)."""
    code: str
    """The code's folder below ``stage``, named after its content (code/<sha256>), so a run never runs
    another commit's code staged beside it."""
    timeout_s: int
    existing_cluster_id: str | None = None
    new_cluster: Mapping[str, Any] = field(default_factory=dict)
    variables: Mapping[str, str] = field(default_factory=dict)
    """Settings outside the run's identity for its ranks (network.env, tracking, site), no secrets."""
    resumes: bool = False
    """The job goes on from an attempt staged in ``resume_path`` (its own, or a shorter budget's)."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices

    @property
    def run_path(self) -> str:
        """The run directory relative to ``stage``, where the task runs."""
        return f"results/runs/{self.run_id}"

    @property
    def run_dir(self) -> str:
        return f"{self.stage}/{self.run_path}"

    @property
    def resume_path(self) -> str:
        """The attempt to resume relative to ``stage``, beside results/: the job seeds its run folder from it."""
        return f"resume/{self.run_id}"


def plan_for(
    run_id: str,
    launch: parts.Launch,
    settings: Settings,
    manifest: str,
    *,
    code: str,
    gpu: bool,
    variables: Mapping[str, str],
    resumes: bool = False,
) -> JobPlan:
    """The job of one run: its layout and time limit from its ``launch``, where and on what cluster from the
    ``databricks:`` section's ``settings``; ``gpu``: the run's accelerator, resolved for the platform."""
    if not settings.stage:
        raise DatabricksSpecError(
            "databricks.stage is not set, so the run's code and files have nowhere to go. HINT: set it to a Unity "
            "Catalog volume path you can write (/Volumes/CATALOG/SCHEMA/VOLUME/snakeddp) or a /Workspace folder."
        )
    return JobPlan(
        run_id=run_id,
        nodes=launch.nodes,
        devices=launch.devices,
        gpu=gpu,
        stage=settings.stage.rstrip("/"),
        manifest=manifest,
        code=code,
        timeout_s=int(launch.runtime) * 60,
        existing_cluster_id=settings.existing_cluster_id,
        new_cluster=parts.thaw(settings.new_cluster),
        variables=dict(variables),
        resumes=resumes,
    )


def write_request(request: Mapping[str, Any], path: Path) -> bool:
    """The request body as databricks-sdk sends it, for ``databricks.submit: false`` (and the record),
    with the values of secret-looking keys masked at any depth (a storage key in ``new_cluster.spark_conf``
    or in the exported ``spark.conf``): the live request still carries them. Whether any was masked."""
    body = as_json(request)
    kept = scrub(body)
    atomic_write_json(path, kept)
    return kept != body


def check_gpu_cluster(plan: JobPlan) -> None:
    """A GPU run's new cluster has a GPU ML runtime, else its ranks would find no CUDA after the cluster
    started (a CPU runtime has no CUDA torch). Its nodes' GPUs, and an existing cluster's, are the workspace's
    to say, which needs credentials: snakeddp.databricks.nodes, when the runs are about to be submitted."""
    if not plan.gpu or plan.existing_cluster_id:
        return
    runtime = plan.new_cluster.get("spark_version")
    why = "launch.accelerator, or the profile's site.accelerator for auto"
    if runtime and not GPU_RUNTIME.search(str(runtime)):
        named = RUNTIME_VERSION.match(str(runtime))
        example = f"{named['version']}-gpu-ml-{named['scala']}" if named else "16.4.x-gpu-ml-scala2.12"
        raise DatabricksSpecError(
            f"run {plan.run_id} trains on GPUs ({why}), and databricks.new_cluster.spark_version {runtime} is "
            "not a GPU ML runtime (*-gpu-ml-*), whose torch is built for CUDA. HINT: set "
            f"databricks.new_cluster.spark_version: {example} (`databricks clusters spark-versions` lists the "
            "workspace's), or set launch.accelerator: cpu."
        )


def spark_conf(plan: JobPlan) -> dict[str, str]:
    """A new cluster's Spark settings: each rank one task (one GPU each on GPU nodes), barrier checks that fail fast."""
    conf = dict(BARRIER_CHECKS)
    if plan.gpu:
        conf["spark.task.resource.gpu.amount"] = "1"
    return conf


def task_parameters(plan: JobPlan) -> list[str]:
    """The entry's argv: the variables it exports, the folder it runs in and the attempt it seeds the run's
    folder from first, then snakeddp.launch's on the spark platform (the driver is the job's one process),
    with paths relative to that folder as the workflow's are."""
    return [
        "--variables",
        json.dumps(dict(plan.variables), sort_keys=True),
        "--workdir",
        plan.stage,
        *(["--resume-from", plan.resume_path] if plan.resumes else []),
        "launch",
        "--",
        "--platform",
        str(platforms.row(PLATFORM).ranks_as),
        "--config",
        f"{plan.run_path}/{RUN_FILE}",
        "--run-dir",
        plan.run_path,
        "--data",
        plan.manifest,
        "--environment-record",
        f"{plan.run_path}/{ENVIRONMENT_FILE}",
    ]


def cluster_spec(plan: JobPlan) -> Any:
    """The new cluster ``plan`` runs on (a run's job cluster, or a sweep's shared one), checked for a GPU run."""
    from databricks.sdk.service import compute

    check_gpu_cluster(plan)
    cluster = dict(plan.new_cluster)
    return compute.ClusterSpec(
        spark_version=cluster.get("spark_version"),
        node_type_id=cluster.get("node_type_id"),
        # One worker per node of the run; the driver starts the ranks and trains none.
        num_workers=plan.nodes,
        spark_conf={**spark_conf(plan), **dict(cluster.get("spark_conf") or {})},
        custom_tags={"snakeddp_run": plan.run_id},
    )


def submit_request(plan: JobPlan) -> dict[str, Any]:
    """Keyword arguments of ``WorkspaceClient().jobs.submit``: the SDK's request objects, checked."""
    from databricks.sdk.service import jobs

    task = jobs.SubmitTask(
        task_key="train",
        description=f"snakeddp run {plan.run_id}: {plan.world_size} ranks through TorchDistributor",
        spark_python_task=jobs.SparkPythonTask(
            python_file=f"{plan.stage}/{plan.code}/{ENTRY}", parameters=task_parameters(plan)
        ),
        timeout_seconds=plan.timeout_s,
    )
    if plan.existing_cluster_id:
        task.existing_cluster_id = plan.existing_cluster_id
    else:
        task.new_cluster = cluster_spec(plan)
    request = {
        "run_name": f"snakeddp {plan.run_id}",
        "tasks": [task],
        "timeout_seconds": plan.timeout_s,
    }
    check(request)
    return request


def as_json(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request body the SDK sends for ``request`` (``jobs.submit`` serialises it the same way)."""
    out = {key: value for key, value in request.items() if key != "tasks"}
    out["tasks"] = [task.as_dict() for task in request["tasks"]]
    return out


def check(request: Mapping[str, Any]) -> None:
    """What the Jobs API requires and the SDK's classes do not check, each as one line with a HINT."""
    tasks = request.get("tasks") or []
    if len(tasks) != 1 or not tasks[0].task_key:
        raise DatabricksSpecError("databricks: a run is one task with a task_key. HINT: this is a bug in snakeddp.")
    task = tasks[0]
    if not (task.spark_python_task and task.spark_python_task.python_file):
        raise DatabricksSpecError("databricks: the task has no python_file to run. HINT: set databricks.stage.")
    if bool(task.existing_cluster_id) == bool(task.new_cluster):
        raise DatabricksSpecError(
            "databricks: a task runs on an existing cluster or a new one, not both or neither. HINT: set "
            "databricks.existing_cluster_id, or databricks.new_cluster with spark_version and node_type_id."
        )
    if task.new_cluster is not None:
        for name in ("spark_version", "node_type_id"):
            if not getattr(task.new_cluster, name):
                raise DatabricksSpecError(
                    f"databricks.new_cluster.{name} is not set, and a new cluster needs it. HINT: set it (`databricks "
                    "clusters spark-versions` and `databricks clusters list-node-types` list what the workspace has; "
                    "an ML runtime, *-ml-*, has torch and TorchDistributor), or set databricks.existing_cluster_id."
                )
    if not request.get("timeout_seconds"):
        raise DatabricksSpecError("databricks: the run has no timeout. HINT: set launch.runtime.")
