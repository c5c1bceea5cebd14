"""The ``azureml:`` config section as the submitter uses it: validated, paths resolved, workspace known.

The workflow validates the whole config and hands this section to the train jobs in the
``SNAKEDDP_PLATFORM_SECTION`` environment variable (JSON): it is not part of any run's config, so
editing it never retrains a finished run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import snakeddp
from snakeddp import config as configuration
from snakeddp.azureml import AzureMLError, images
from snakeddp.environment.builds import torch_build
from snakeddp.run.variables import PLATFORM_SECTION as SECTION

WORKSPACE_KEYS = ("subscription_id", "resource_group", "workspace_name")
# The checkout that holds the Snakefile and envs/: relative requirement and Dockerfile paths start here.
CHECKOUT = Path(snakeddp.__file__).resolve().parents[2]


@dataclass(frozen=True)
class Workspace:
    """Where jobs go. Any field may be unknown when only a job spec is written."""

    subscription_id: str | None
    resource_group: str | None
    workspace_name: str | None

    def missing(self) -> list[str]:
        return [key for key in WORKSPACE_KEYS if not getattr(self, key)]

    def as_dict(self) -> dict[str, str | None]:
        return {key: getattr(self, key) for key in WORKSPACE_KEYS}


@dataclass(frozen=True)
class Settings:
    """The validated ``azureml:`` section; see config/schema.yaml for each key."""

    sdk: str
    workspace: Workspace
    compute: str | None
    distribution: str
    experiment: str
    environment: dict[str, Any]
    data: dict[str, Any]
    submit: bool
    shm_size: str

    @classmethod
    def from_section(cls, section: Mapping[str, Any], cwd: Path | None = None) -> Settings:
        """Validate a raw ``azureml:`` section (defaults filled) and read its workspace config file."""
        resolved = configuration.validate({"azureml": dict(section)}, source=SECTION)["azureml"]
        return cls(
            sdk=resolved["sdk"],
            workspace=_workspace(resolved["workspace"], cwd or Path.cwd()),
            compute=resolved["compute"],
            distribution=resolved["distribution"],
            experiment=resolved["experiment"],
            environment=resolved["environment"],
            data=resolved["data"],
            submit=resolved["submit"],
            shm_size=resolved["shm_size"],
        )

    @classmethod
    def from_environment(cls, env: Mapping[str, str] = os.environ) -> Settings:
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
            raise AzureMLError(
                "azureml.compute is not set, so there is nowhere to train. HINT: create a compute cluster "
                "(az ml compute create --name gpu-cluster --type amlcompute --size Standard_NC24ads_A100_v4 "
                "--min-instances 0 --max-instances 2) and set azureml.compute: gpu-cluster in the config."
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
        if self.environment["source"] != "image":
            return None
        build = torch_build(cuda)
        image = self.environment["image"]
        if image is None:
            return images.default_image(build)
        images.check(image, build)
        return image

    def checkout_path(self, key: str) -> Path:
        """An ``environment`` file (requirements, dockerfile), resolved against the checkout; must exist."""
        value = Path(self.environment[key])
        path = value if value.is_absolute() else CHECKOUT / value
        if not path.is_file():
            raise AzureMLError(
                f"azureml.environment.{key}: {path} does not exist. HINT: relative paths are relative to the "
                f"snakeddp checkout ({CHECKOUT}); point it at an existing file or pick another environment.source."
            )
        return path


def _workspace(section: Mapping[str, Any], cwd: Path) -> Workspace:
    values: dict[str, Any] = {}
    if section["config_file"]:
        path = Path(section["config_file"])
        path = path if path.is_absolute() else cwd / path
        try:
            loaded = json.loads(path.read_text())
        except OSError as exc:
            raise AzureMLError(
                f"azureml.workspace.config_file: cannot read {path} ({exc.strerror}). HINT: download it from "
                "the Azure portal (workspace overview, Download config.json); relative paths are relative to "
                "the directory Snakemake runs in."
            ) from None
        except json.JSONDecodeError as exc:
            raise AzureMLError(f"azureml.workspace.config_file: {path} is not valid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise AzureMLError(f"azureml.workspace.config_file: {path} must hold a JSON object")
        values = {key: loaded.get(key) for key in WORKSPACE_KEYS}
    values.update({key: section[key] for key in WORKSPACE_KEYS if section[key]})
    return Workspace(**{key: values.get(key) for key in WORKSPACE_KEYS})
