"""A real standalone Spark cluster (a master and two 1-core workers on 127.0.0.1), started once per
test file that asks for ``spark_cluster``: a driver's session costs 11-19 s here, a cluster 10 s.

It is stopped at the end of the file whatever happened (also on SIGTERM), and teardown fails if
any of its processes (master, workers, executors) outlived it; its directory (logs, executors' work
directories) is removed when it stopped cleanly.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.spark_cluster import Cluster, ClusterError, executors, start, stop
from tests.helpers import sigterm_interrupts


@pytest.fixture(scope="module")
def spark_cluster() -> Iterator[Cluster]:
    with sigterm_interrupts():
        try:
            cluster = start(Path(tempfile.mkdtemp(prefix="snakeddp-spark-")))
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
