"""The spark platform: a run's ranks are one barrier stage of a Spark application, one rank per executor
task (docs/spark.md).

``master`` finds and checks the master without pyspark (the workflow's checks import it); ``driver`` is
a run's driver (``snakeddp.launch`` starts it through the torchdistributor launcher,
``snakeddp.spark.launcher``), which hands the run to the workflow's one application
(``sharing``, ``application``) or starts its own (``session``); ``stage`` runs the shared application's
ranks, each forked in its task from a Python worker that the executor's ``daemon`` forked with torch
imported; a run's own application runs them with TorchDistributor's torchrun; ``rank`` is the rank.

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``provenance``, ``remote``, ``report``, ``run``, ``training``, ``util``, ``warm``; and, going
up a floor, ``train`` (the floors below its own: tests/test_floors.py).
"""

from snakeddp.errors import ConfigError

#: The platform's name: its row in snakeddp.platforms, its folder under a run directory (the driver's scratch).
PLATFORM = "spark"


class SparkError(ConfigError, RuntimeError):
    """The spark platform cannot start or finish a run: no master, no JDK, no pyspark, a failed Spark job."""
