# The profile's own config entries kept whatever --config is typed, read before config/config.yaml.
# Snakemake's private parts used below, checked against the releases they were written for.
import os
import sys
from pathlib import Path

from snakeddp.errors import ConfigError, UpstreamVersionError
from snakeddp.workflow import preflight as snakeddp_preflight

try:
    from snakeddp.compat import snakemake as snakeddp_snakemake
except UpstreamVersionError as error:
    snakeddp_preflight.stop(error)

# The invocation the user typed, not the Snakemake a job runs inside (a remote or subprocess job):
# only it checks the profile, talks to the terminal and refreshes records.
TYPED_INVOCATION = not (workflow.remote_exec or workflow.subprocess_exec)

# A profile's `config:` (its platform, what its nodes have) holds whatever else is typed: Snakemake
# would take it only as the default of --config, so any typed --config dropped it (the jobs it
# spawns get it on theirs). A platform typed against the profile's is refused.
if TYPED_INVOCATION:
    from snakeddp.workflow import profile as snakeddp_profile

    try:
        PROFILE = snakeddp_profile.find(
            sys.argv[1:], os.environ, Path.cwd(), Path(workflow.basedir)
        )
        PROFILE_CONFIG, TYPED_CONFIG = snakeddp_snakemake.keep_profile_config(
            workflow, PROFILE.entries
        )
        snakeddp_profile.check_platform(PROFILE, PROFILE_CONFIG, TYPED_CONFIG)
    except ConfigError as error:
        snakeddp_preflight.stop(error)
else:
    TYPED_CONFIG = {}
# Snakemake announces any command-line config as "Config file ... is extended by additional
# config"; the profile's own settings alone are no news to the user, so they are set aside while
# config/config.yaml loads and put back right after.
PROFILE_ASIDE = snakeddp_snakemake.set_aside_profile_config(workflow, TYPED_CONFIG)
