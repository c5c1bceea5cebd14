"""What one run's AzureML job must do, before any SDK is involved.

Both spec builders (v2 and v1) read a ``JobPlan``; tests compare the specs they write against it.
The job's command is the same on both: every process runs the remote jobs' entry
(``snakeddp.remote.entry train``) with the launcher matching the distribution (``env`` for AzureML's
PyTorch distribution, ``mpirun`` for its MPI one), so ``snakeddp.train`` maps AzureML's variables to its ranks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from snakeddp.azureml import PLATFORM, jobside
from snakeddp.azureml.settings import AzureMLError, Settings
from snakeddp.config import parts
from snakeddp.remote import inherited
from snakeddp.run.layout import RUN_FILE

# launch.launcher on the azureml platform -> the distribution that starts such processes.
LAUNCHER_FOR_DISTRIBUTION = {"pytorch": "env", "mpi": "mpirun"}
ENVIRONMENT_FILE = "environment.json"
OUTPUT_NAME = "run_dir"


@dataclass(frozen=True)
class EnvironmentSpec:
    """The software of the job: an image plus pinned pip packages, a Dockerfile, or a registered environment."""

    source: str
    image: str | None = None
    python: str | None = None
    pins: tuple[str, ...] = ()
    dockerfile: Path | None = None
    registered: str | None = None


@dataclass(frozen=True)
class DataInput:
    """The dataset folder: a local directory to upload, or an existing ``azureml://datastores/...`` folder."""

    manifest_name: str
    mode: str
    local_dir: Path | None = None
    uri: str | None = None


@dataclass(frozen=True)
class JobPlan:
    """Everything a job spec is made from; paths are absolute, the specs make them relative."""

    run_id: str
    sdk: str
    distribution: str
    nodes: int
    devices: int
    accelerator: str  # cpu or gpu: launch.accelerator with auto resolved by the profile's site
    compute: str
    experiment: str
    timeout_s: int
    spec_dir: Path
    data: DataInput
    environment: EnvironmentSpec
    datastore: str
    shm_size: str  # /dev/shm of each node's container: NCCL's intra-node buffers live there
    resume_dir: Path | None = None
    variables: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def launcher(self) -> str:
        return LAUNCHER_FOR_DISTRIBUTION[self.distribution]

    @property
    def code_dir(self) -> Path:
        return self.spec_dir / "code"

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices

    def entry_arguments(self, data_dir: str, run_dir: str, resume_dir: str | None) -> list[str]:
        """argv of every process, given how the SDK spells the data, output and resume folders: each is a rank
        AzureML started (the entry's ``train``)."""
        argv = ["python", "-m", "snakeddp.remote.entry"]
        if self.resume_dir is not None:
            if resume_dir is None:
                raise ValueError("this plan resumes, so the resume folder must be given")
            argv += ["--resume-from", resume_dir]
        return [
            *argv,
            "train",
            "--",
            "--config",
            RUN_FILE,
            "--run-dir",
            run_dir,
            "--data",
            f"{data_dir}/{self.data.manifest_name}",
            "--launcher",
            self.launcher,
            "--environment-record",
            ENVIRONMENT_FILE,
        ]


def distribution_for(settings: Settings, launch: parts.Launch) -> str:
    """The configured distribution, checked against ``launch.launcher`` (auto follows the distribution)."""
    configured = launch.launcher
    if configured in ("auto", LAUNCHER_FOR_DISTRIBUTION[settings.distribution]):
        return settings.distribution
    if configured == "mpirun":
        raise AzureMLError(
            f"launch.launcher=mpirun but azureml.distribution={settings.distribution}. HINT: set "
            "azureml.distribution: mpi (AzureML then runs mpirun), or launch.launcher: auto."
        )
    raise AzureMLError(
        f"launch.launcher={configured} cannot start processes on AzureML, which starts them itself. "
        "HINT: set launch.launcher: auto and choose azureml.distribution: pytorch or mpi."
    )


def job_variables(
    launch: parts.Launch,
    distribution: str,
    compute: str,
    sdk: str,
    env: Mapping[str, str] = os.environ,
) -> dict[str, str]:
    """Variables every process of the job gets (nothing secret: they end up in provenance): what every
    remote job inherits (snakeddp.remote.inherited), where it was sent, and its threads."""
    threads = str(launch.threads_per_process)
    variables = {
        **inherited.variables(PLATFORM, env),
        jobside.SDK: sdk,
        jobside.COMPUTE: compute,
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
    }
    if distribution == "pytorch":
        # AzureML documents RANK, LOCAL_RANK, WORLD_SIZE and NODE_RANK but not the processes per node.
        variables["LOCAL_WORLD_SIZE"] = str(launch.devices)
    if distribution == "mpi" and launch.master_port is not None:
        variables["MASTER_PORT"] = str(launch.master_port)
    return variables
