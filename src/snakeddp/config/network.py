"""Which variables ``network.env`` takes. The schema's ``network.env`` name pattern is the one
definition; the launchers (``snakeddp.cluster.network``) and the config check both ask here."""

from __future__ import annotations

import functools
import re

from snakeddp.config.schema import load_schema
from snakeddp.util.redact import is_secret_name


@functools.cache
def _pattern() -> re.Pattern[str]:
    env = load_schema()["properties"]["network"]["properties"]["env"]
    return re.compile(env["propertyNames"]["pattern"])


@functools.cache
def families() -> tuple[str, ...]:
    """The pattern as a person reads it: ``NCCL_*``, ..., and the single names it allows."""
    prefixes, names = re.fullmatch(r"\^\(\(([A-Z_|]+)\)_\[A-Za-z0-9_\]\+\|([A-Z_|]+)\)\$", _pattern().pattern).groups()
    return (*(f"{prefix}_*" for prefix in prefixes.split("|")), *names.split("|"))


def is_network_variable(name: str) -> bool:
    return _pattern().fullmatch(name) is not None


def network_variable_error(name: str, secret_home: str = "") -> str:
    """Why ``network.env`` refuses ``name``: a secret (it would be recorded; ``secret_home``: where the platform's
    ranks read one instead, config.secret_home), or not a network variable."""
    if is_secret_name(name):
        return (
            f"network.env.{name}: looks like a secret, and network.env is recorded in every run's provenance, "
            "which never holds secrets. HINT: remove it from the config "
            + (secret_home or f"and export {name} in the shell that runs snakemake instead.")
        )
    return (
        f"network.env.{name}: not a network variable. HINT: network.env takes {', '.join(families())}; "
        "export other variables in the shell that runs snakemake."
    )
