"""The toy's own section, ``toy:`` (docs/development.md's step 3): a part (snakeddp.config.parts.Settings) with
its schema beside it, ``settings.yaml``, which the config's schema takes in from the registry, so a user sets
``--config toy='{node: NAME}'`` with snakeddp's config/schema.yaml unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from snakeddp.config import parts


@dataclass(frozen=True)
class Settings(parts.Settings):
    """``toy``: how the toy queue runs a run."""

    key: ClassVar[str] = "toy"
    schema_file: ClassVar[Path] = Path(__file__).with_name("settings.yaml")

    node: str
    """The name of the one node the queue places every rank on (TOY_NODE)."""


def from_environment(env: Mapping[str, str]) -> Settings:
    """The section a train job was handed by the workflow (snakeddp.run.variables.PLATFORM_SECTION)."""
    from snakeddp.run import variables  # not at import: the config's schema imports this module

    return Settings.of(variables.platform_section(env, Settings.key))
