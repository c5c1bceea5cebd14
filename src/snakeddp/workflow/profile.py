"""The profile's own ``config:`` entries, which decide the platform whatever else is typed.

Snakemake reads a profile's ``config:`` list only as the default of ``--config``: a typed
``--config 'model={lr: 0.01}'`` replaces it whole, and ``platform=slurm`` with it, so the slurm
and azureml profiles trained on this machine. This module finds the profile(s) the invocation
uses, the way Snakemake's command line does (``--profile``, else ``$SNAKEMAKE_PROFILE``; the
workflow profile ``profiles/default`` or ``--workflow-profile`` last), and reads their ``config:``
entries, so the workflow can put them under what was typed (``compat.snakemake.keep_profile_config``).
Imported while the Snakefile is read: no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from snakeddp.config import ConfigError


class ProfileError(ConfigError):
    """A typed setting contradicts the profile; the message says which and how to fix it."""


@dataclass(frozen=True)
class ProfileConfig:
    """The ``config:`` entries (``key=value`` strings, as Snakemake's ``--config`` takes them) of
    the profile that set them last, and that profile as it was named."""

    name: str | None
    entries: tuple[str, ...]


def _option_values(argv: Sequence[str], option: str) -> list[str]:
    """Every value of ``option`` in ``argv`` (``--profile X`` and ``--profile=X``), in order."""
    values = []
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            values.append(argv[i + 1])
        elif arg.startswith(option + "="):
            values.append(arg.partition("=")[2])
    return values


def _profile_file(path: Path) -> Path | None:
    """The profile's YAML inside a directory (profile.yaml, else config.yaml), or the file itself."""
    if path.is_file():
        return path
    for name in ("profile.yaml", "config.yaml"):
        if (path / name).is_file():
            return path / name
    return None


def _general_profile(name: str) -> Path | None:
    """Where Snakemake finds ``--profile NAME``: a path, or a name under its config directories."""
    from snakemake.cli import get_profile_dir

    found = get_profile_dir(name)
    return found[1] if found else None


def _workflow_profile(argv: Sequence[str], cwd: Path, basedir: Path) -> Path | None:
    """Snakemake's workflow profile: ``--workflow-profile`` (``none`` turns it off), else profiles/default."""
    given = _option_values(argv, "--workflow-profile")
    name = given[-1] if given else "default"
    if name == "none":
        return None
    for candidate in (cwd / name, cwd / "profiles" / name, basedir / "profiles" / name):
        found = _profile_file(candidate) if candidate.exists() else None
        if found:
            return found
    return None


def _entries(value: Any) -> tuple[str, ...]:
    """A profile's ``config:`` as ``key=value`` strings: a list as is, a mapping as Snakemake formats one."""
    if isinstance(value, Mapping):
        return tuple(f"{key}={_flow(val)}" for key, val in value.items())
    return tuple(str(entry) for entry in value or ())


def _flow(value: Any) -> str:
    """A value as --config takes it: a scalar as is, a mapping or list in YAML flow style."""
    if isinstance(value, Mapping | list):
        return yaml.safe_dump(value, default_flow_style=True).strip()
    return str(value)


def find(argv: Sequence[str], environ: Mapping[str, str], cwd: Path, basedir: Path) -> ProfileConfig:
    """The ``config:`` of the profiles this command line uses; a later profile's ``config:`` replaces
    an earlier one's whole, as Snakemake merges profiles (by top-level key)."""
    names = _option_values(argv, "--profile") or list(filter(None, [environ.get("SNAKEMAKE_PROFILE")]))
    files = [(name, _general_profile(name)) for name in names if name != "none"]
    workflow_file = _workflow_profile(argv, cwd, basedir)
    if workflow_file:
        files.append((str(workflow_file.parent), workflow_file))
    found = ProfileConfig(None, ())
    for name, file in files:
        if file is None:
            continue
        content = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        if isinstance(content, Mapping) and content.get("config"):
            found = ProfileConfig(name, _entries(content["config"]))
    return found


def check_platform(profile: ProfileConfig, profile_config: Mapping[str, Any], typed: Mapping[str, Any]) -> None:
    """A platform typed with ``--config`` or in a ``--configfile`` must be the profile's own."""
    mine, theirs = profile_config.get("platform"), typed.get("platform")
    if mine is None or theirs is None or mine == theirs:
        return
    raise ProfileError(
        f"platform: {theirs} was given on the command line (--config or --configfile), and --profile "
        f"{profile.name} runs on platform {mine}. HINT: leave platform out of --config and your config files "
        f"(the profile sets it), or run with --profile {theirs}."
    )
