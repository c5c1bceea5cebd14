# Where snakemake runs: config/config.yaml, profiles/ and results/ are relative to the checkout's root.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from snakeddp.workflow import preflight as snakeddp_preflight

try:
    snakeddp_preflight.check_working_directory(Path.cwd(), Path(workflow.basedir))
except snakeddp_preflight.PreflightError as error:
    snakeddp_preflight.stop(error)

# Profiles name their platform with `config: platform=...`. Snakemake announces any command-line
# config as "Config file ... is extended by additional config" on every run; a profile's platform
# alone is no news to the user, so it is set aside while config/config.yaml loads and put back
# right after (Snakefile). A user's own --config or --configfile is still announced.
PROFILE_PLATFORM = (
    workflow.config_settings.overwrite_config.pop("platform")
    if set(workflow.config_settings.overwrite_config) == {"platform"}
    else None
)
