"""The table: one row per platform (snakeddp.platforms says what a row is for)."""

from __future__ import annotations

from dataclasses import dataclass

from snakeddp.errors import ConfigError


@dataclass(frozen=True)
class Row:
    """One platform as the rest of snakeddp sees it."""

    name: str  # the profile's name and the config's platform
    module: str  # its contract: a module whose CONTRACT implements snakeddp.platforms.contract.Platform
    default_launcher: str  # what launch.launcher: auto starts the ranks with
    section: str | None = None  # its own config section, which its jobs get (variables.PLATFORM_SECTION)
    own_launchers: tuple[str, ...] = ()  # launchers that start ranks only on platforms naming them
    only_own_launchers: bool = False  # and this platform starts ranks with no other
    remote: bool = False  # a train job submits the run to a service and waits for it
    this_machine: bool = False  # jobs and ranks run on the machine Snakemake runs on


TABLE = (
    Row("local", "snakeddp.local.platform", "direct", this_machine=True),
    Row("slurm", "snakeddp.slurm.platform", "srun", own_launchers=("srun",)),
    Row("azureml", "snakeddp.azureml.platform", "env", section="azureml", remote=True),
    Row(
        "spark",
        "snakeddp.spark.platform",
        "torchdistributor",
        section="spark",
        own_launchers=("torchdistributor",),
        only_own_launchers=True,
    ),
    # A Databricks job's driver runs the ranks as the spark platform does, on the job's cluster.
    Row(
        "databricks",
        "snakeddp.databricks.platform",
        "torchdistributor",
        section="databricks",
        own_launchers=("torchdistributor",),
        only_own_launchers=True,
        remote=True,
    ),
)
BY_NAME = {row.name: row for row in TABLE}


def row(name: str) -> Row:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ConfigError(
            f"unknown platform {name!r}. HINT: run with one of the profiles {', '.join(BY_NAME)} "
            "(snakemake --profile NAME), which set it."
        ) from None


def homes(launcher: str) -> tuple[Row, ...]:
    """The platforms that own ``launcher`` (empty: it runs on any that takes other launchers)."""
    return tuple(row for row in TABLE if launcher in row.own_launchers)
