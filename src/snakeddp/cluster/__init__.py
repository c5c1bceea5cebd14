"""Launchers: how training processes start and how each learns its rank.

Detection order matters (Lightning's connector does the same): torchrun can run inside a Slurm
allocation or an MPI job, and mpirun inside Slurm, so the most specific launcher is asked first;
``Spawn`` (Lightning starts the processes itself) is the fallback that always matches.

May import: ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``, ``platforms``,
``run``, ``util`` (the floors below its own: tests/test_floors.py).
"""

from __future__ import annotations

from snakeddp.util.handoff import hand_off_before_package

# `python -m snakeddp.cluster.supervisor` (each local run's supervisor) imports this package first: its job
# goes to the workflow's warm process here, before the imports below (0.2 s of CPU in every run, jsonschema
# and the platforms' registry among them), not from the supervisor's first line after them.
hand_off_before_package("snakeddp.cluster.supervisor")

import functools
import importlib
from collections.abc import Mapping

from snakeddp.cluster.base import Launcher, LaunchError, LaunchPlan, Layout
from snakeddp.cluster.direct import Direct
from snakeddp.cluster.envvars import EnvVars
from snakeddp.cluster.mpi import MpiRun
from snakeddp.cluster.spawn import Spawn
from snakeddp.cluster.torchrun import TorchRun
from snakeddp.platforms import homes, launchers
from snakeddp.platforms import row as platform_row

# The launchers any platform may run. A platform's own (its job side's, snakeddp.platforms.jobside) go
# before the generic one named by their ``detect_before``, whose variables their processes also see.
GENERIC: tuple[type[Launcher], ...] = (
    TorchRun,  # torchrun sets its own variables even inside Slurm or MPI jobs
    Direct,  # as does snakeddp's own supervisor (torchrun's variables, its own launch id)
    MpiRun,  # mpirun inside a scheduler's allocation also sees the scheduler's variables
    EnvVars,  # AzureML's PyTorch distribution, or any launcher exporting RANK/WORLD_SIZE
    Spawn,
)


@functools.cache
def all_launchers() -> tuple[type[Launcher], ...]:
    """Every launcher in the order ``detect`` asks them: the platforms' imported now, by their job sides."""
    owned: list[type[Launcher]] = []
    for target in launchers().values():
        module, _, name = target.partition(":")
        owned.append(getattr(importlib.import_module(module), name))
    ordered: list[type[Launcher]] = []
    for generic in GENERIC:
        ordered += [launcher for launcher in owned if launcher.detect_before == generic.name]
        ordered.append(generic)
    return (*[launcher for launcher in owned if launcher not in ordered], *ordered)


def by_name() -> dict[str, type[Launcher]]:
    return {launcher.name: launcher for launcher in all_launchers()}


__all__ = [
    "GENERIC",
    "LaunchError",
    "LaunchPlan",
    "Launcher",
    "Layout",
    "all_launchers",
    "by_name",
    "detect",
    "for_platform",
    "get",
]


def get(name: str) -> Launcher:
    try:
        return by_name()[name]()
    except KeyError:
        raise LaunchError(f"unknown launcher {name!r}; choose one of {', '.join(by_name())}") from None


def detect(env: Mapping[str, str]) -> Launcher:
    """The launcher that started this process, by the priority above."""
    for launcher in all_launchers():
        if launcher.detect(env):
            return launcher()
    raise AssertionError("Spawn always matches")


def for_platform(configured: str, platform: str) -> Launcher:
    """Resolve ``launch.launcher`` (possibly ``auto``: the platform's row says what it means there)."""
    row = platform_row(platform)
    name = row.default_launcher if configured == "auto" else configured
    owners = [owner.name for owner in homes(name)]
    if owners and platform not in owners:
        raise LaunchError(
            f"launch.launcher={name} needs the {' or '.join(owners)} profile (it starts ranks only there). "
            f"HINT: run with --profile profiles/{owners[0]}, or set launch.launcher: auto ({row.default_launcher} "
            f"on the {platform} platform)."
        )
    if row.only_own_launchers and name not in row.own_launchers:
        raise LaunchError(
            f"launch.launcher={configured} on the {platform} platform, which starts its ranks with "
            f"{' or '.join(row.own_launchers)} only. HINT: set launch.launcher: auto ({row.default_launcher})."
        )
    return get(name)


def resolve(name: str | None, env: Mapping[str, str], devices: int = 1) -> tuple[Launcher, Layout]:
    """The launcher of this process and its layout; a clear error when they cannot be resolved."""
    launcher = get(name) if name else detect(env)
    if isinstance(launcher, Spawn):
        guard_foreign_launch(env)
        launcher.devices = devices
    elif not launcher.detect(env):
        required = {name: var for name, var in launcher.variables.items() if name not in launcher.optional}
        missing = [var for var in required.values() if var not in env]
        raise LaunchError(
            f"this process was meant to be started by {launcher.name}, but its variables are missing "
            f"({', '.join(missing) or 'see snakeddp.cluster'}). Refusing to train: without them every "
            "process would train its own independent copy. HINT: start it with `python -m snakeddp.launch`."
        )
    return launcher, launcher.layout(env)


def guard_foreign_launch(env: Mapping[str, str]) -> None:
    """Refuse to spawn when another launcher already started several copies of this process.

    Without this, `mpirun -np 2 python -m snakeddp.train` on a config that expects spawning
    trains two independent copies that each write the same files.
    """
    for launcher in all_launchers():
        if launcher is Spawn or not launcher.detect(env):
            continue
        try:
            layout = launcher().layout(env)
        except LaunchError:
            continue
        if layout.world_size > 1:
            raise LaunchError(
                f"this process was started by {launcher.name} as rank {layout.rank} of {layout.world_size}, "
                f"but training was asked to spawn its own processes. HINT: pass --launcher {launcher.name} "
                "(or set launch.launcher) so the ranks are used instead of duplicated."
            )
    if env.get("LOCAL_RANK") and "MASTER_PORT" not in env:
        raise LaunchError("LOCAL_RANK is set but MASTER_PORT is not: ranks would not find each other")
