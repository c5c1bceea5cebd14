"""The files an AzureML job is built from, staged under ``results/runs/<run>/azureml/``.

    azureml/code/         the job's working directory: the code snapshot (snakeddp.remote.folder), run.yaml
                          and environment.json (the record of the AzureML environment, hashed)
    azureml/resume/       the previous attempt (snakeddp.remote.attempt.stage_resume)
    azureml/job.yml       the spec (v2), or job.runconfig + conda_dependencies.yml (v1)

Everything here is rewritten on each attempt; the run directory's own files stay where they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snakeddp.azureml.plan import ENVIRONMENT_FILE, EnvironmentSpec
from snakeddp.azureml.settings import AzureMLError, Settings
from snakeddp.environment.builds import DEFAULT, torch_build
from snakeddp.environment.files import REQUIRE_HASHES, locked_build
from snakeddp.environment.lock import ACCELERATED, read_lock
from snakeddp.errors import EnvFileError
from snakeddp.remote.folder import Folder
from snakeddp.run.layout import RUN_FILE
from snakeddp.run.runfile import RunFile
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.hashing import sha256_file, sha256_json

RECORD_FORMAT = "snakeddp-azureml-environment/1"
V2_SPEC_FILE = "job.yml"
V1_SPEC_FILE, V1_CONDA_FILE = "job.runconfig", "conda_dependencies.yml"


def clear_specs(spec_dir: Path) -> None:
    """Remove the specs of an earlier attempt, so the directory never holds one of another SDK."""
    for name in (V2_SPEC_FILE, V1_SPEC_FILE, V1_CONDA_FILE):
        (spec_dir / name).unlink(missing_ok=True)


def environment_spec(settings: Settings, cuda: str = DEFAULT) -> EnvironmentSpec:
    """The job's software from ``azureml.environment`` and the torch build ``environment.cuda`` names;
    files are read and the base image checked against the build now, so either fails early."""
    env = settings.environment
    build = torch_build(cuda)
    if env.source == "image":
        image = settings.base_image(cuda)
        requirements = settings.checkout_path("requirements")
        lock = read_lock(requirements)
        # The lock's torch in the chosen build (PyPI's wheel, or the same version from PyTorch's index) and the
        # runtime wheels it adds, from the build's own lock; every line with its hashes, which pip then requires.
        try:
            own = locked_build(build.cuda, requirements.parent)
        except EnvFileError as error:
            raise AzureMLError(str(error)) from None
        pins = tuple(pin.requirement() for key, pin in lock.pins.items() if key != ACCELERATED)
        added = tuple(pin.requirement() for pin in own.pins.values())
        options = (*build.pip_options(), REQUIRE_HASHES)
        return EnvironmentSpec(source="image", image=image, python=env.python, pins=(*options, *pins, *added))
    if env.source == "dockerfile":
        if settings.sdk == "v1":
            raise AzureMLError(
                "azureml.environment.source=dockerfile needs azureml.sdk: v2 (azureml-core cannot build a "
                "local Docker context without uploading it by hand). HINT: use sdk: v2, or source: image."
            )
        if build.label is not None:
            raise AzureMLError(
                f"environment.cuda={cuda} with azureml.environment.source=dockerfile: AzureML builds the "
                "Dockerfile without build arguments, so it would install PyPI's torch build. HINT: use "
                "source: image (it installs the chosen build), or build the image with snakemake build_image, "
                "push it and register it (source: registered)."
            )
        return EnvironmentSpec(source="dockerfile", dockerfile=settings.checkout_path("dockerfile"))
    if not env.registered:
        raise AzureMLError(
            "azureml.environment.source=registered but azureml.environment.registered is not set. "
            "HINT: name the environment, e.g. registered: azureml:my-env:3."
        )
    return EnvironmentSpec(source="registered", registered=env.registered)


def _tree_sha256(directory: Path) -> str:
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return sha256_json({str(p.relative_to(directory)): sha256_file(p) for p in files})


def environment_record(spec: EnvironmentSpec) -> dict[str, Any]:
    """What the job's environment is built from, with a hash: the environment part of the resume key."""
    identity: dict[str, Any] = {"platform": "azureml", "source": spec.source}
    if spec.source == "image":
        identity.update(image=spec.image, python=spec.python, requirements_sha256=sha256_json(list(spec.pins)))
    elif spec.source == "dockerfile":
        assert spec.dockerfile is not None
        identity.update(dockerfile=spec.dockerfile.name, build_context_sha256=_tree_sha256(spec.dockerfile.parent))
    else:
        identity.update(registered=spec.registered)
    return {"format": RECORD_FORMAT, "stage": "train", **identity, "hash": sha256_json(identity)}


def snapshot_code(folder: Folder, run: RunFile, record: dict[str, Any]) -> None:
    """A fresh job working directory: the code snapshot, run.yaml and the environment record."""
    code_dir = folder.snapshot()
    run.write(code_dir / RUN_FILE)
    atomic_write_json(code_dir / ENVIRONMENT_FILE, record)
