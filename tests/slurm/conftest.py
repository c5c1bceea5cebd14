"""The real local Slurm cluster, started once per session for the tests marked ``slurm``.

It is stopped at the end of the session whatever happened (also on SIGTERM), and teardown
fails if any of its processes outlived it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import sigterm_interrupts
from tests.slurm.cluster import Cluster, ClusterError, start, stop


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    with sigterm_interrupts():
        try:
            # Not under pytest's basetemp: munged wants every directory above its socket world-searchable.
            cluster = start(Path(tempfile.mkdtemp(prefix="snakeddp-slurm-")))
        except ClusterError as error:
            pytest.fail(f"could not start the local Slurm cluster: {error}")
        try:
            yield cluster
        finally:
            notes = stop(cluster)
            assert not notes, f"the Slurm cluster did not stop cleanly: {notes}"
