"""Communication settings (NCCL, gloo, UCX, libfabric, OpenMPI) passed to every rank of a run.

They come from ``network.env`` in the config (usually set by the profile) and from variables of
those families already exported where the launcher runs (an sbatch script, a login shell). The
launcher hands all of them to every rank: torchrun and srun pass their environment on, mpirun
gets ``-x NAME`` for each. Provenance records them with the other cluster variables.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from snakeddp.config.network import is_network_variable, network_variable_error
from snakeddp.errors import ConfigError
from snakeddp.util.redact import is_secret_name


def variables(config: Mapping[str, Any]) -> dict[str, str]:
    """``network.env`` of a validated config as environment strings."""
    env = config.get("network", {}).get("env", {})
    secret = sorted(name for name in env if is_secret_name(name))
    if secret:
        from snakeddp.config import remote_secret_home

        platform = config.get("platform")
        raise ConfigError(
            "\n".join(network_variable_error(name, remote_secret_home(platform, name)) for name in secret)
        )
    return {name: str(value) for name, value in env.items()}


def forwarded(env: Mapping[str, str]) -> dict[str, str]:
    """The network variables of ``env`` that every rank must see, secret-looking names left out
    (and named in the log, so that a setting missing on the ranks is not a mystery)."""
    names = [name for name in sorted(env) if is_network_variable(name)]
    dropped = [name for name in names if is_secret_name(name)]
    if dropped:
        print(
            f"snakeddp: not forwarding {', '.join(dropped)} to the ranks: the names look like credentials, "
            "which snakeddp never passes on or records (ranks started by torchrun or srun still inherit them).",
            file=sys.stderr,
        )
    return {name: env[name] for name in names if name not in dropped}
