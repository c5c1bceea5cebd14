"""A real standalone Spark cluster (a master and two 1-core workers on 127.0.0.1), started once per
test file that asks for ``spark_cluster``: a driver's session costs 11-19 s here, a cluster 10 s.
``spark_gpu_cluster`` is one 2-core worker offering two stand-in GPUs through a discovery script
(test_spark_gpu.py), the shape of a 2-GPU machine: one worker fewer to start, and Spark's master hands
out both of that worker's addresses. They are 90 and 91, which name no GPU on any host: a GPU host's
CPU suite must not train on its real GPUs 0 and 1.

It is stopped at the end of the file whatever happened (also on SIGTERM), and teardown fails if
any of its processes (master, workers, executors) outlived it; its directory (logs, executors' work
directories) is removed when it stopped cleanly.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.spark_cluster import Cluster, ClusterError, executors, start, stop
from tests.helpers import sigterm_interrupts


@pytest.fixture(scope="module")
def spark_cluster() -> Iterator[Cluster]:
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark_gpu_cluster() -> Iterator[Cluster]:
    with running_cluster(workers=1, cores=2, gpus=2, first_gpu=90) as cluster:
        yield cluster


@contextlib.contextmanager
def running_cluster(**shape: int) -> Iterator[Cluster]:
    """``scripts.spark_cluster.start(**shape)`` in a fresh directory, stopped and checked on the way out."""
    with sigterm_interrupts():
        try:
            cluster = start(Path(tempfile.mkdtemp(prefix="snakeddp-spark-")), **shape)
        except ClusterError as error:
            pytest.fail(f"could not start the local Spark cluster: {error}")
        try:
            yield cluster
        finally:
            left = executors(cluster)
            notes = stop(cluster)
            assert not notes, f"the Spark cluster did not stop cleanly: {notes} (executors at the end: {left})"
            # Kept when something outlived the cluster, for its logs; else removed, or every test run's logs
            # and executor work directories would pile up in /tmp.
            shutil.rmtree(cluster.directory, ignore_errors=True)
