"""SDK v2 (azure-ai-ml): the command job of one run, written as YAML and validated offline.

The job is built with the SDK's own ``command()`` builder and dumped by the SDK; only the local
paths are rewritten relative to the YAML (the SDK dumps a local input path as ``azureml:<path>``,
a data asset name). ``azure.ai.ml.load_job`` then validates the file, so what is written is what
``az ml job create --file job.yml`` and the submitter both accept.
"""

from __future__ import annotations

import io
import os
import shlex
from pathlib import Path
from typing import Any

import yaml
from azure.ai.ml import Input, MpiDistribution, Output, PyTorchDistribution, command, load_job
from azure.ai.ml.entities import BuildContext, Environment
from azure.ai.ml.exceptions import MlException
from marshmallow import ValidationError

from snakeddp.azureml.plan import OUTPUT_NAME, JobPlan
from snakeddp.azureml.settings import AzureMLError
from snakeddp.azureml.staging import V2_SPEC_FILE as SPEC_FILE
from snakeddp.compat.azure_ai_ml import dump_job
from snakeddp.util import yamltext
from snakeddp.util.fsutil import atomic_write_text

SCHEMA = "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json"
ENV_NAME = "snakeddp-train"


def job_command(plan: JobPlan) -> str:
    """The shell command of every process; AzureML substitutes the ${{...}} placeholders first."""
    resume = "${{inputs.resume}}" if plan.resume_dir is not None else None
    return shlex.join(plan.entry_arguments("${{inputs.data}}", f"${{{{outputs.{OUTPUT_NAME}}}}}", resume))


def _environment(plan: JobPlan) -> Environment | str:
    spec = plan.environment
    if spec.source == "registered":
        assert spec.registered is not None
        return spec.registered
    if spec.source == "dockerfile":
        assert spec.dockerfile is not None
        return Environment(build=BuildContext(path=str(spec.dockerfile.parent), dockerfile_path=spec.dockerfile.name))
    conda = {
        "name": ENV_NAME,
        "channels": ["conda-forge", "nodefaults"],
        "dependencies": [f"python={spec.python}", "pip", {"pip": list(spec.pins)}],
    }
    return Environment(image=spec.image, conda_file=conda)


def _relative(path: Path, start: Path) -> str:
    return os.path.relpath(path, start)


def build(plan: JobPlan) -> dict[str, Any]:
    """The job as the YAML document ``az ml job create --file`` takes."""
    data_path = plan.data.uri or str(plan.data.local_dir)
    inputs = {"data": Input(type="uri_folder", path=data_path, mode=plan.data.mode)}
    if plan.resume_dir is not None:
        inputs["resume"] = Input(type="uri_folder", path=str(plan.resume_dir), mode="download")
    distribution = (
        PyTorchDistribution(process_count_per_instance=plan.devices)
        if plan.distribution == "pytorch"
        else MpiDistribution(process_count_per_instance=plan.devices)
    )
    node = command(
        display_name=plan.run_id,
        experiment_name=plan.experiment,
        tags=plan.tags,
        code=str(plan.code_dir),
        command=job_command(plan),
        environment=_environment(plan),
        environment_variables=plan.variables,
        compute=plan.compute,
        instance_count=plan.nodes,
        shm_size=plan.shm_size,
        distribution=distribution,
        inputs=inputs,
        outputs={OUTPUT_NAME: Output(type="uri_folder", mode="rw_mount")},
        timeout=plan.timeout_s,
    )
    stream = io.StringIO()
    dump_job(node, stream)
    document = yamltext.safe_load(stream.getvalue())
    # Local paths relative to the YAML, as a person would write them (and unlike the SDK's dump).
    document["code"] = _relative(plan.code_dir, plan.spec_dir)
    if plan.data.uri is None:
        assert plan.data.local_dir is not None
        document["inputs"]["data"]["path"] = _relative(plan.data.local_dir, plan.spec_dir)
    if plan.resume_dir is not None:
        document["inputs"]["resume"]["path"] = _relative(plan.resume_dir, plan.spec_dir)
    if plan.environment.source == "dockerfile":
        assert plan.environment.dockerfile is not None
        document["environment"]["build"]["path"] = _relative(plan.environment.dockerfile.parent, plan.spec_dir)
    return {"$schema": SCHEMA, **document}


def load(path: Path) -> Any:
    """The job in ``path`` as the SDK reads it; AzureMLError naming the file when it is not a valid job."""
    try:
        return load_job(path)
    except (ValidationError, MlException) as exc:
        raise AzureMLError(f"{path} is not a valid AzureML command job: {exc}") from None


def write(plan: JobPlan) -> Path:
    """Write ``job.yml`` into the plan's spec directory and validate it with the SDK."""
    path = plan.spec_dir / SPEC_FILE
    atomic_write_text(path, yaml.safe_dump(build(plan), sort_keys=False))
    load(path)
    return path
