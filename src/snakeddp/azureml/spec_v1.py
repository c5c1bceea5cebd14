"""SDK v1 (azureml-core): the ScriptRunConfig of one run, built and written without a workspace.

Data reach the job as datastore references: the dataset (and a resumed attempt) are uploaded to
the ``azureml.data.datastore`` under ``snakeddp/...`` before submission and mounted (or
downloaded) into the job; its run directory is an output folder mounted from the same datastore.
The run configuration is saved as ``job.runconfig`` (plus ``conda_dependencies.yml``), the file
``RunConfiguration.load`` reads back.

Reference names have no underscores: azureml-core camel-cases them when it loads a saved run
configuration, which would break the ``$AZUREML_DATAREFERENCE_<name>`` variables.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml
from azureml.core import Environment, ScriptRunConfig
from azureml.core.runconfig import (
    DataReferenceConfiguration,
    DockerConfiguration,
    MpiConfiguration,
    PyTorchConfiguration,
    RunConfiguration,
)
from azureml.core.script_run_config import get_run_config_from_script_run
from azureml.data import OutputFileDatasetConfig

from snakeddp.azureml.plan import JobPlan
from snakeddp.azureml.settings import AzureMLError
from snakeddp.azureml.staging import V1_CONDA_FILE as CONDA_FILE
from snakeddp.azureml.staging import V1_SPEC_FILE as SPEC_FILE
from snakeddp.compat.azureml_core import output_data
from snakeddp.run.tries import newest_checkpoint
from snakeddp.util.fsutil import atomic_write_text
from snakeddp.util.hashing import sha256_file

ENV_NAME = "snakeddp-train"
DATA_REF, RESUME_REF, OUTPUT_REF = "data", "resume", "rundir"
REGISTERED = re.compile(r"^azureml:(?P<name>[^:@/]+)(?::(?P<version>[^:@/]+))?$")


def data_path(plan: JobPlan) -> tuple[str, str]:
    """(datastore, path) of the dataset: the configured URI, or where the submitter uploads the local one."""
    if plan.data.uri is not None:
        match = re.match(r"^azureml://datastores/(?P<store>[^/]+)/paths/(?P<path>.+?)/?$", plan.data.uri)
        if match is None:
            raise AzureMLError(f"azureml.data.uri: {plan.data.uri} is not azureml://datastores/<name>/paths/<path>")
        return match["store"], match["path"]
    assert plan.data.local_dir is not None
    return plan.datastore, f"snakeddp/datasets/{plan.data.local_dir.name}"


def resume_path(plan: JobPlan) -> str:
    """Where the submitter uploads the attempt to resume: one folder per checkpoint content."""
    assert plan.resume_dir is not None
    newest = newest_checkpoint(plan.resume_dir)
    assert newest is not None  # staged only with one (remote.attempt.stage_resume)
    digest = sha256_file(newest)[:16]
    return f"snakeddp/resume/{plan.run_id}/{digest}"


def uploads(plan: JobPlan) -> list[tuple[Path, str]]:
    """(local folder, datastore path) pairs the submitter uploads to ``plan.datastore`` before submitting."""
    pending = []
    if plan.data.uri is None:
        assert plan.data.local_dir is not None
        pending.append((plan.data.local_dir, data_path(plan)[1]))
    if plan.resume_dir is not None:
        pending.append((plan.resume_dir, resume_path(plan)))
    return pending


def job_command(plan: JobPlan) -> str:
    """The shell command of every process; AzureML sets $AZUREML_DATAREFERENCE_* and fills DatasetOutputConfig:*."""
    resume = f"$AZUREML_DATAREFERENCE_{RESUME_REF}" if plan.resume_dir is not None else None
    argv = plan.entry_arguments(f"$AZUREML_DATAREFERENCE_{DATA_REF}", f"DatasetOutputConfig:{OUTPUT_REF}", resume)
    # Reference variables must expand, so they are double-quoted; every other word is shell-quoted.
    return " ".join(f'"{word}"' if word.startswith("$AZUREML_DATAREFERENCE_") else shlex.quote(word) for word in argv)


def _environment(plan: JobPlan) -> Environment:
    spec = plan.environment
    if spec.source == "registered":
        assert spec.registered is not None
        match = REGISTERED.match(spec.registered)
        if match is None:
            raise AzureMLError(
                f"azureml.environment.registered: {spec.registered} cannot be used with sdk v1. "
                "HINT: name a workspace environment as azureml:<name>:<version>."
            )
        # Only the name and version travel in the spec; the submitter fetches the definition.
        env = Environment(match["name"])
        env.version = match["version"]
        return env
    conda = plan.spec_dir / CONDA_FILE
    document = {
        "name": ENV_NAME,
        "channels": ["conda-forge", "nodefaults"],
        "dependencies": [f"python={spec.python}", "pip", {"pip": list(spec.pins)}],
    }
    atomic_write_text(conda, yaml.safe_dump(document, sort_keys=False))
    return Environment.from_docker_image(ENV_NAME, spec.image, conda_specification=str(conda))


def build(plan: JobPlan) -> ScriptRunConfig:
    """The ScriptRunConfig of the run (no workspace needed)."""
    if plan.distribution == "pytorch":
        backend = "Gloo" if plan.accelerator == "cpu" else "Nccl"
        distribution = PyTorchConfiguration(
            communication_backend=backend, process_count=plan.world_size, node_count=plan.nodes
        )
    else:
        distribution = MpiConfiguration(process_count_per_node=plan.devices, node_count=plan.nodes)
    src = ScriptRunConfig(
        source_directory=str(plan.code_dir),
        command=job_command(plan),
        compute_target=plan.compute,
        environment=_environment(plan),
        distributed_job_config=distribution,
        max_run_duration_seconds=plan.timeout_s,
        docker_runtime_config=DockerConfiguration(use_docker=True, shm_size=plan.shm_size),
    )
    mode = "mount" if plan.data.mode == "ro_mount" else "download"
    store, path = data_path(plan)
    references = {DATA_REF: DataReferenceConfiguration(datastore_name=store, mode=mode, path_on_datastore=path)}
    if plan.resume_dir is not None:
        references[RESUME_REF] = DataReferenceConfiguration(
            datastore_name=plan.datastore, mode="download", path_on_datastore=resume_path(plan)
        )
    src.run_config.data_references = references
    output = OutputFileDatasetConfig(
        name=OUTPUT_REF, destination=(plan.datastore, f"snakeddp/runs/{{run-id}}/{OUTPUT_REF}")
    ).as_mount()
    src.run_config.output_data = {OUTPUT_REF: output_data(output)}
    src.run_config.environment_variables = dict(plan.variables)
    return src


def output_path(run_id: str) -> str:
    """Datastore folder of the run directory written by the AzureML run ``run_id``."""
    return f"snakeddp/runs/{run_id}/{OUTPUT_REF}"


def load(path: Path) -> RunConfiguration:
    try:
        return RunConfiguration.load(str(path))
    except Exception as exc:  # azureml-core raises assorted types for unreadable run configurations
        raise AzureMLError(f"{path} is not a valid AzureML run configuration: {exc}") from None


def write(plan: JobPlan) -> tuple[Path, ScriptRunConfig]:
    """Save the full run configuration as ``job.runconfig`` and read it back; return it and the ScriptRunConfig."""
    src = build(plan)
    path = plan.spec_dir / SPEC_FILE
    path.unlink(missing_ok=True)
    # RunConfiguration.save only writes to a path that already exists.
    path.touch()
    get_run_config_from_script_run(src).save(path=str(path))
    load(path)
    return path, src
