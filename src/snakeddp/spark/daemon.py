"""The executors' Python daemon in the workflow's shared Spark application (``spark.python.daemon.module``).

    python -m snakeddp.spark.daemon pyspark.worker

An executor starts its daemon once and forks a Python worker from it for every task (pyspark's
``daemon.py``). This one imports what a rank imports (torch, Lightning, ``snakeddp.train``) first, with
one-thread pools, then is pyspark's daemon: each worker is forked with them imported, and a rank forked
from the worker (``snakeddp.spark.stage``) starts training without importing them again. An import that
fails leaves the ranks to import for themselves, as they would under torchrun; every other task is
served as by pyspark's own daemon.
"""

from __future__ import annotations

import sys

from snakeddp.forking.imports import import_once
from snakeddp.forking.safety import NotForkable
from snakeddp.warm.preload import OPTIONAL, TRAINING

#: The module each forked rank runs as ``__main__`` (forgotten once imported: its imports stay).
RANK = "snakeddp.spark.rank"
#: What a rank imports first: the training modules, the stage's task (a rank's parent) and the rank's module.
PRELOAD = (*TRAINING, "snakeddp.spark.stage", RANK)


def preload() -> None:
    for module in PRELOAD:
        try:
            import_once([module], entries=[module] if module == RANK else [])
        except NotForkable as why:
            if module in OPTIONAL:
                continue
            # The executor's stderr (its worker's work directory): the ranks import for themselves.
            print(f"snakeddp.spark.daemon: ranks will import for themselves: {why}", file=sys.stderr, flush=True)
            return


def main() -> None:
    preload()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
