"""The ``databricks:`` config section as a part (snakeddp.config.parts.Settings): the cluster, and where a
run's files are staged. Its keys' schema is ``settings.yaml`` beside it, which the config's schema takes in
from the registry. Light: every validation of a config reads the schema."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from snakeddp.config import parts


@dataclass(frozen=True)
class NewCluster(parts.Part):
    """``databricks.new_cluster``: the cluster the runs get when existing_cluster_id is None."""

    key: ClassVar[str] = "databricks.new_cluster"

    spark_version: str | None
    """A Databricks ML runtime (16.4.x-gpu-ml-scala2.12)."""
    node_type_id: str | None
    """The workers' and driver's instance type."""
    spark_conf: Mapping[str, str]
    """More Spark settings of the cluster."""


@dataclass(frozen=True)
class Settings(parts.Settings):
    """``databricks``: how a run is submitted as a one-time Jobs run (credentials are databricks-sdk's)."""

    key: ClassVar[str] = "databricks"
    schema_file: ClassVar[Path] = Path(__file__).with_name("settings.yaml")

    profile: str | None
    """A ~/.databrickscfg profile; None: the SDK's default chain."""
    stage: str | None
    """The volume or workspace folder the run's code, run files and data go below."""
    existing_cluster_id: str | None
    """An all-purpose cluster every run is submitted to, instead of new_cluster."""
    share_cluster: Literal["auto", True, False]
    """One all-purpose cluster for every run of the invocation (true), a job cluster each (false), or auto."""
    new_cluster: NewCluster
    """The cluster the runs get when existing_cluster_id is None."""
    submit: bool
    """False writes the request and submits nothing."""


def from_environment(env: Mapping[str, str]) -> Settings:
    """The settings a train job was handed by the workflow."""
    from snakeddp.run import variables  # not at import: the config's schema imports this module

    return Settings.of(variables.platform_section(env, Settings.key))
