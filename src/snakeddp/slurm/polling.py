"""How often the Snakemake process asks Slurm about this workflow's jobs, where the environment says.

``SNAKEDDP_SLURM_WATCH_S``: seconds between two looks of the pending-job watch (``snakeddp.slurm.watch``, 10 s
unset). ``SNAKEDDP_SLURM_STATUS_S``: the most seconds between two of the executor plugin's status checks, which
otherwise wait 10 s longer after each check in which no job ended, up to 3 minutes, so a job is seen to have
ended up to that long after it did (unset: the plugin's own waits). A small cluster whose scheduler answers at
once, like the test cluster, can be asked every few seconds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from snakeddp.slurm.nodes import SlurmNodesError
from snakeddp.util import settings

WATCH_VARIABLE = "SNAKEDDP_SLURM_WATCH_S"
STATUS_VARIABLE = "SNAKEDDP_SLURM_STATUS_S"


def seconds(variable: str, default: float | None, environ: Mapping[str, str] = os.environ) -> float | None:
    """``variable``'s seconds where it is set, else ``default``; one line with a HINT where it is no number above 0."""
    sets = "how often Snakemake asks Slurm about this workflow's jobs"
    return settings.seconds(environ, variable, default, sets=sets, example=10, error=SlurmNodesError)


def cap_status_checks(environ: Mapping[str, str] = os.environ) -> None:
    """The executor plugin's status checks at most STATUS_VARIABLE's seconds apart, where it is set."""
    cap = seconds(STATUS_VARIABLE, None, environ)
    if cap is not None:
        from snakeddp.compat.snakemake_executor_plugin_slurm import cap_status_checks as cap_plugins

        cap_plugins(cap)
