"""The ``azureml:`` config section as a part (snakeddp.config.parts.Settings), as the submitter uses it:
validated, paths resolved, workspace known. Its keys' schema is ``settings.yaml`` beside it, which the
config's schema takes in from the registry; light at import, since every validation of a config reads it.

The workflow validates the whole config and hands this section to the train jobs in the
``SNAKEDDP_PLATFORM_SECTION`` environment variable (JSON): it is not part of any run's config, so
editing it never retrains a finished run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import snakeddp
from snakeddp import config as configuration
from snakeddp.azureml import AzureMLError
from snakeddp.config import parts

WORKSPACE_KEYS = ("subscription_id", "resource_group", "workspace_name")
# The checkout that holds the Snakefile and envs/: relative requirement and Dockerfile paths start here.
CHECKOUT = Path(snakeddp.__file__).resolve().parents[2]


@dataclass(frozen=True)
class Workspace(parts.Part):
    """``azureml.workspace``: where jobs go. Any id may be unknown when only a job spec is written."""

    key: ClassVar[str] = "azureml.workspace"

    config_file: str | None
    """The workspace's config.json, relative to the directory Snakemake runs in."""
    subscription_id: str | None
    """Azure subscription id of the workspace (the config file's, unless given)."""
    resource_group: str | None
    """Resource group of the workspace."""
    workspace_name: str | None
    """Name of the AzureML workspace."""

    def missing(self) -> list[str]:
        return [key for key in WORKSPACE_KEYS if not getattr(self, key)]

    def as_dict(self) -> dict[str, str | None]:
        return {key: getattr(self, key) for key in WORKSPACE_KEYS}


@dataclass(frozen=True)
class Environment(parts.Part):
    """``azureml.environment``: the software the job runs in."""

    key: ClassVar[str] = "azureml.environment"

    source: Literal["image", "dockerfile", "registered"]
    """image (base image, Python, the pinned requirements), dockerfile (built on AzureML) or registered."""
    image: str | None
    """The base image of source image; None: AzureML's OpenMPI image of environment.cuda's CUDA major."""
    python: str
    """Python version installed into the image."""
    requirements: str
    """Pinned pip requirements for source image, relative to the checkout."""
    dockerfile: str
    """The Dockerfile of source dockerfile, relative to the checkout."""
    registered: str | None
    """The AzureML environment of source registered."""


@dataclass(frozen=True)
class Data(parts.Part):
    """``azureml.data``: where the job reads the dataset from."""

    key: ClassVar[str] = "azureml.data"

    uri: str | None
    """None uploads results/data/<dataset>/; else an azureml://datastores/... folder holding the same files."""
    mode: Literal["ro_mount", "download"]
    """ro_mount streams files on demand; download copies the dataset to each node first."""
    datastore: str
    """The datastore sdk v1 uploads to and writes outputs to."""


@dataclass(frozen=True)
class Settings(parts.Settings):
    """The validated ``azureml:`` section, its workspace resolved (``from_section``)."""

    key: ClassVar[str] = "azureml"
    schema_file: ClassVar[Path] = Path(__file__).with_name("settings.yaml")

    sdk: Literal["v2", "v1"]
    """v2: azure-ai-ml; v1: azureml-core (support ended 2026-06-30)."""
    workspace: Workspace
    """The AzureML workspace."""
    compute: str | None
    """The compute cluster that trains."""
    distribution: Literal["pytorch", "mpi"]
    """How AzureML starts each node's processes."""
    experiment: str
    """The experiment jobs are grouped under."""
    environment: Environment
    """The software the job runs in."""
    data: Data
    """Where the job reads the dataset from."""
    shm_size: str
    """Size of /dev/shm in each node's container."""
    submit: bool
    """False writes the job spec and submits nothing."""

    @classmethod
    def from_section(cls, section: Mapping[str, Any], cwd: Path | None = None) -> Settings:
        """Validate a raw ``azureml:`` section (defaults filled) and read its workspace config file."""
        from snakeddp.run.variables import PLATFORM_SECTION  # not at import: the config's schema imports this module

        validated = configuration.validate({"azureml": dict(section)}, source=PLATFORM_SECTION)["azureml"]
        return cls.of(validated).resolved(cwd)

    def resolved(self, cwd: Path | None = None) -> Settings:
        """The settings with the workspace's ids from its config file (relative to ``cwd``), the section's over them."""
        return dataclasses.replace(self, workspace=_workspace(self.workspace, cwd or Path.cwd()))

    @classmethod
    def from_environment(cls, env: Mapping[str, str] = os.environ) -> Settings:
        from snakeddp.run.variables import PLATFORM_SECTION as SECTION

        raw = env.get(SECTION)
        if raw is None:
            raise AzureMLError(
                f"{SECTION} is not set, so the azureml settings are unknown. HINT: run training through "
                "the workflow (snakemake --profile profiles/azureml), which sets it from the config's azureml: "
                "section, or export it as the JSON of that section."
            )
        try:
            section = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise AzureMLError(f"{SECTION} is not valid JSON: {exc}") from None
        if not isinstance(section, dict):
            raise AzureMLError(f"{SECTION} must hold a JSON object (the azureml: section)")
        return cls.from_section(section)

    def require_compute(self) -> str:
        if not self.compute:
            try:  # the workspace's names where the config gives them: the command runs as printed
                workspace = self.require_workspace()
                where = shlex.join(
                    ["--resource-group", workspace.resource_group, "--workspace-name", workspace.workspace_name]
                )
            except AzureMLError:
                where = "--resource-group <group> --workspace-name <workspace>"
            raise AzureMLError(
                "azureml.compute is not set, so there is nowhere to train. HINT: create a compute cluster "
                "(az ml compute create --name gpu-cluster --type amlcompute --size Standard_NC24ads_A100_v4 "
                f"--min-instances 0 --max-instances 2 {where}) and set azureml.compute: gpu-cluster in the config."
            )
        return self.compute

    def require_workspace(self) -> Workspace:
        missing = self.workspace.missing()
        if missing:
            keys = ", ".join(f"azureml.workspace.{key}" for key in missing)
            raise AzureMLError(
                f"the AzureML workspace is not fully configured: {keys} missing. HINT: set "
                "azureml.workspace.config_file to the workspace's config.json (Azure portal, workspace "
                "overview, Download config.json), or set azureml.workspace.subscription_id, resource_group "
                "and workspace_name in the config."
            )
        return self.workspace

    def base_image(self, cuda: str) -> str | None:
        """The base image of ``source: image`` for the torch build ``environment.cuda`` names: the
        configured one, refused when its name says another CUDA major, else the build's own
        (snakeddp.azureml.images); None for the other sources, which bring their own software."""
        from snakeddp.azureml import images  # not at import: the config's schema imports this module
        from snakeddp.environment.builds import torch_build

        if self.environment.source != "image":
            return None
        build = torch_build(cuda)
        image = self.environment.image
        if image is None:
            return images.default_image(build)
        images.check(image, build)
        return image

    def checkout_path(self, key: str) -> Path:
        """An ``environment`` file (requirements, dockerfile), resolved against the checkout; must exist."""
        value = Path(getattr(self.environment, key))
        path = value if value.is_absolute() else CHECKOUT / value
        if not path.is_file():
            raise AzureMLError(
                f"azureml.environment.{key}: {path} does not exist. HINT: relative paths are relative to the "
                f"snakeddp checkout ({CHECKOUT}); point it at an existing file or pick another environment.source."
            )
        return path


def _workspace(given: Workspace, cwd: Path) -> Workspace:
    """The workspace with the ids its config file holds, those given in the section over them."""
    values: dict[str, Any] = {}
    if given.config_file:
        path = Path(given.config_file)
        path = path if path.is_absolute() else cwd / path
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise AzureMLError(
                f"azureml.workspace.config_file: cannot read {path} ({exc.strerror}). HINT: download it from "
                "the Azure portal (workspace overview, Download config.json); relative paths are relative to "
                "the directory Snakemake runs in."
            ) from None
        except json.JSONDecodeError as exc:
            raise AzureMLError(
                f"azureml.workspace.config_file: {path} is not valid JSON: {exc}. HINT: name the workspace's "
                "config.json as the Azure portal downloads it (workspace overview, Download config.json)."
            ) from None
        if not isinstance(loaded, dict):
            raise AzureMLError(f"azureml.workspace.config_file: {path} must hold a JSON object")
        values = {key: loaded.get(key) for key in WORKSPACE_KEYS}
    values.update({key: getattr(given, key) for key in WORKSPACE_KEYS if getattr(given, key)})
    return dataclasses.replace(given, **{key: values.get(key) for key in WORKSPACE_KEYS})
