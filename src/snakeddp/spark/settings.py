"""The ``spark:`` config section as a part (snakeddp.config.parts.Settings): where the spark profile's
driver sends each run. Its keys' schema is ``settings.yaml`` beside it, which the config's schema takes in
from the registry. Light: every validation of a config reads the schema."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from snakeddp.config import parts


@dataclass(frozen=True)
class Settings(parts.Settings):
    """``spark``: the master and the Spark settings of the run's application."""

    key: ClassVar[str] = "spark"
    schema_file: ClassVar[Path] = Path(__file__).with_name("settings.yaml")

    master: str | None
    """The Spark master URL; None: $MASTER, else spark.master in spark-defaults.conf."""
    conf: Mapping[str, str | int | float | bool]
    """Spark settings for the run's application, on top of spark-defaults.conf and snakeddp's own."""


def from_environment(env: Mapping[str, str]) -> Settings:
    """The settings a job was handed by the workflow (all defaults where it was handed none: a Databricks
    job's driver runs the spark platform's with them)."""
    from snakeddp.run import variables  # not at import: the config's schema imports this module

    return Settings.of(variables.platform_section(env, Settings.key))
