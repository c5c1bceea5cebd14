"""Ingestion by a Slurm array job (snakeddp.slurm.ingest, snakeddp.data.spread) on the real Slurm test cluster:
a Delta table written by delta-rs and a Parquet folder give the partitions, entries (BLAKE3) and validation set
of a local ingestion of the same table, byte for byte, each window read by an array task of its own; a bad
value read on a node stops the step in the local ingestion's one line."""

from __future__ import annotations

import json
import os

import pytest

from snakeddp.data.table import ingest
from snakeddp.slurm import ingest as slurm_ingest
from tests import tables
from tests.helpers import Workflow, subprocess_env
from tests.slurm.cluster import Cluster
from tests.slurm.workflow import SlurmWorkflow, config
from tests.spread_tables import bad_value_said_as_locally, delta_table, parquet_folder, same_files, the_rows

pytestmark = [pytest.mark.slurm]


def slurm_env(cluster: Cluster) -> dict[str, str]:
    return {**subprocess_env(**cluster.env()), "SNAKEDDP_PLATFORM": "slurm"}


@pytest.mark.parametrize("kind", ["delta", "parquet"])
def test_an_array_job_ingests_the_partitions_a_local_ingestion_writes(slurm_cluster, tmp_path, monkeypatch, kind):
    write = delta_table if kind == "delta" else parquet_folder
    table = write(tmp_path / "table", the_rows())
    params = tables.params(table, partitions=3)
    ingest(params, tmp_path / "local")
    monkeypatch.chdir(tmp_path)  # the array's tasks run here (--chdir), as a data job's in the workflow's directory
    summary = slurm_ingest.ingest(params, tmp_path / "slurm", slurm_env(slurm_cluster))

    assert len(same_files(tmp_path / "local", tmp_path / "slurm")) == 2 * (3 + 1)
    assert summary["pieces"] == 2 and json.loads((tmp_path / "slurm" / "val.json").read_text())["blake3"]
    # Each window read by an array task: two processes, none of them this one.
    readers = {tuple(r) for r in summary["readers"]}
    assert len(readers) == 2 and all(pid != os.getpid() for _, pid in readers), readers
    assert not (tmp_path / "slurm" / ".pieces").exists()


def test_a_bad_value_read_by_an_array_task_is_the_local_ingestions_one_line(slurm_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad_value_said_as_locally(tmp_path, lambda params, out: slurm_ingest.ingest(params, out, slurm_env(slurm_cluster)))


@pytest.mark.e2e
def test_snakemake_profile_slurm_ingests_by_an_array_job(slurm_cluster, tmp_path):
    """The command the user types: `snakemake --profile slurm` up to the manifests, whose ingest job (itself a
    Slurm job) submits the array; the partitions and manifest are those of `--profile local`."""
    table = parquet_folder(tmp_path / "table", the_rows())
    section = {"path": str(table), "features": tables.FEATURES, "label": "y"}
    data = {"source": "table", "num_train_files": 3, "num_classes": 1, "table": section}
    for profile, flow in (("slurm", SlurmWorkflow), ("local", None)):
        (tmp_path / profile).mkdir()
        workflow = flow(tmp_path / profile, slurm_cluster) if flow else Workflow(tmp_path / profile, profile=profile)
        workflow.write_config(config(data=data))
        workflow.run("--until", "data_manifest", env=subprocess_env(**slurm_cluster.env()))
    [log] = (tmp_path / "slurm" / "logs" / "data").glob("*/ingest.log")
    assert "600,000 rows in 2 pieces, read by a Slurm array job" in log.read_text(), log.read_text()
    names = same_files(tmp_path / "local" / "results" / "data", tmp_path / "slurm" / "results" / "data")
    assert sum(name.endswith(".safetensors") for name in names) == 4 and any("manifest-" in n for n in names)
