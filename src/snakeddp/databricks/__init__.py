"""Databricks Jobs: a run's training submitted as a one-time run (``runs/submit``) through databricks-sdk,
its spec built from the SDK's own request classes (``spec``) and checked offline, as the AzureML specs are.

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``provenance``, ``remote``, ``report``, ``run``, ``training``, ``util``, ``warm`` (the floors
below its own: tests/test_floors.py).
"""

from snakeddp.errors import ConfigError

#: The platform's name: its row in snakeddp.platforms, its folder under a run directory.
PLATFORM = "databricks"


class DatabricksError(ConfigError, RuntimeError):
    """A Databricks run that cannot be staged, submitted or copied back: no credentials, a failed or cancelled run."""
