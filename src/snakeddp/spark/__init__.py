"""The spark platform: a run's training is a Spark application whose driver starts the ranks with
pyspark's TorchDistributor, one rank per executor task (docs/spark.md).

``master`` finds and checks the master without pyspark (the workflow's checks import it);
``driver`` is the application (``snakeddp.launch`` starts it through the torchdistributor
launcher, ``snakeddp.cluster.torchdistributor``); ``rank`` is the script each task's torchrun runs.
"""

#: The platform's name: its row in snakeddp.platforms, its folder under a run directory (the driver's scratch).
PLATFORM = "spark"
