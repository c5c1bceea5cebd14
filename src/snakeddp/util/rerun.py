"""The snakemake command a HINT asks for, as the user types it: with the profile of the platform the job ran
under (a bare ``snakemake <target>`` stops on "cores have to be specified"), the arguments shell-quoted."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

#: local, slurm, azureml, spark or databricks: the profile's platform, which the workflow exports to every job
#: (``snakeddp.run.variables.PLATFORM``).
PLATFORM_VARIABLE = "SNAKEDDP_PLATFORM"
#: What a HINT adds: a plan without them names other runs and datasets (or none: a KeyError of Snakemake's).
SAME_CONFIG = "with your --configfile and --config if you gave any"


def snakemake(*arguments: str, env: Mapping[str, str] | None = None) -> str:
    """``snakemake --profile <platform> ARGUMENTS``; the local profile outside a job (a command of the user's)."""
    profile = (os.environ if env is None else env).get(PLATFORM_VARIABLE) or "local"
    return shlex.join(["snakemake", "--profile", profile, *arguments])


def forcing(*paths: object) -> str:
    """The command that runs the jobs writing ``paths`` again, and what to add to it."""
    return f"{snakemake('--forcerun', *map(str, paths))}, {SAME_CONFIG}"
