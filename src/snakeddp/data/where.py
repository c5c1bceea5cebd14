"""Where a table is ingested: on the cluster the profile names, where its platform has a way to spread the
read (INGESTERS: Spark's executors, a Slurm array job, each reading windows: snakeddp.data.spread), else by
the ingest step's own process.

The ingest step reads the platform from the workflow's exported variables (snakeddp.run.variables.PLATFORM), so
the choice changes no rule's command: which way ran never changes a dataset, whose partitions are the same
bytes either way.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from snakeddp.run import variables

#: Platform -> its ingestion ("module:function", given the dataset's parameters, the output folder and the
#: environment; it ingests here what it does not spread). A name, not an import: the data stage imports no
#: platform it does not run on.
INGESTERS = {"spark": "snakeddp.spark.ingest:ingest", "slurm": "snakeddp.slurm.ingest:ingest"}

Ingest = Callable[[Mapping[str, Any], "str | Path"], dict[str, Any]]


def ingester(env: Mapping[str, str] = os.environ) -> Ingest:
    """The ingestion of the platform the workflow exported: its own where it has one, else snakeddp.data.table's."""
    name = INGESTERS.get(variables.platform(env))
    if name is None:
        from snakeddp.data.table import ingest

        return ingest
    module, _, function = name.partition(":")
    found = getattr(importlib.import_module(module), function)
    return lambda params, out_dir: found(params, out_dir, env)
