# Where snakemake runs: config/config.yaml, profiles/ and results/ are relative to the checkout's root.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from snakeddp.workflow import preflight as snakeddp_preflight

try:
    snakeddp_preflight.check_working_directory(Path.cwd(), Path(workflow.basedir))
except snakeddp_preflight.PreflightError as error:
    snakeddp_preflight.stop(error)
