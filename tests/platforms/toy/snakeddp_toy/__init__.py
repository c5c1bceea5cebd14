"""The toy platform: the smallest remote platform, outside snakeddp, written by following docs/development.md's
"A new platform, step by step" (tests/platforms/test_toy.py runs the tiny pipeline on it).

A train job submits its run to the toy queue (``queue``: a detached process on this machine, as a cloud's
scheduler would be elsewhere) and follows it (``job``: snakeddp.remote.job's sequence); the queue starts
each rank with torch's variables, the node it "places" it on (``TOY_NODE``: the toy's own setting,
``toy.node``, ``settings``) and the job's id (``TOY_JOB``),
both recorded by provenance, and every rank runs snakeddp.remote.entry from the staged code snapshot. It
refuses what it cannot run (more than one node) in one line with a HINT.
Installed as a package would be: its row is the ``snakeddp.platforms`` entry point in
``snakeddp_toy-0.1.dist-info/entry_points.txt``, found on PYTHONPATH.
"""

from snakeddp.errors import ConfigError
from snakeddp.platforms import Row

#: The platform's name: its row, its profile's config and the schema's platform enum (the registry's).
PLATFORM = "toy"
#: The node the toy queue places every rank on, and the id of the job it runs; set by the queue for each
#: rank, read by the ranks (the job side).
NODE = "TOY_NODE"
JOB = "TOY_JOB"

# The queue starts every rank itself with torch's variables (launch.launcher auto: env), on this machine.
# Its own section, toy: (its node's name), read through its settings part.
ROW = Row(
    PLATFORM,
    "snakeddp_toy.platform",
    "env",
    section="toy",
    settings="snakeddp_toy.settings:Settings",
    this_machine=True,
    job_side="snakeddp_toy.jobside",
)


class ToyError(ConfigError):
    """What the toy platform cannot run, or a toy job that did not succeed; the message says what and how to fix it."""
