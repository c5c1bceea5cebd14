"""The toy platform: the smallest platform outside snakeddp, written by following docs/development.md's
"A new platform, step by step" (tests/platforms/test_toy.py runs the tiny pipeline on it).

Its jobs and ranks run on this machine, as the local platform's do; what makes it a platform of its own
is what a real one adds: a node its scheduler names (``TOY_NODE``), a job id (``TOY_JOB``), both recorded
by provenance, and a refusal of what it cannot run (more than one node), in one line with a HINT.
Installed as a package would be: its row is the ``snakeddp.platforms`` entry point in
``snakeddp_toy-0.1.dist-info/entry_points.txt``, found on PYTHONPATH.
"""

from snakeddp.errors import ConfigError
from snakeddp.platforms import Row

#: The platform's name: its row, its profile's config and the schema's platform enum (the registry's).
PLATFORM = "toy"
#: The node the toy scheduler "places" every rank on, and the id of the job it "runs"; set by the workflow
#: for every job (the contract's exports), read by the ranks (the job side).
NODE = "TOY_NODE"
JOB = "TOY_JOB"

ROW = Row(PLATFORM, "snakeddp_toy.platform", "direct", this_machine=True, job_side="snakeddp_toy.jobside")


class ToyError(ConfigError):
    """What the toy platform cannot run; the message says what and how to fix it."""
