"""The data rules for tables and module datasets: one ingestion pass, the same manifest contract."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from snakeddp import config
from snakeddp.data.identity import fingerprint


def write_table(path, seed=0, rows=400):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.standard_normal(rows), "b": rng.standard_normal(rows)})
    frame["y"] = (frame["a"] > 0).astype(int)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)


def table_config(tiny_config, partitions=3):
    tiny_config["data"] = {
        "name": "tbl",
        "source": "table",
        "num_train_files": partitions,
        "table": {"path": "data/t.csv", "features": ["a", "b"], "label": "y"},
    }
    return tiny_config


def dataset_dirs(workflow, *args):
    done = workflow.run("--dry-run", *args)
    text = done.stdout + done.stderr
    return sorted({word.split("/")[2] for word in text.split() if word.startswith("results/data/tbl-")})


@pytest.mark.e2e
def test_a_table_is_ingested_once_then_placed_partition_by_partition(workflow, tiny_config):
    write_table(workflow.directory / "data" / "t.csv")
    workflow.write_config(table_config(tiny_config, partitions=3))
    jobs = workflow.planned_jobs()
    assert {k: jobs.get(k) for k in ("data_table", "data_partition", "data_val", "data_manifest")} == {
        "data_table": 1,
        "data_partition": 3,
        "data_val": 1,
        "data_manifest": 1,
    }


@pytest.mark.e2e
def test_a_changed_table_is_a_new_dataset(workflow, tiny_config):
    table = workflow.directory / "data" / "t.csv"
    write_table(table, seed=0)
    workflow.write_config(table_config(tiny_config))
    before = dataset_dirs(workflow)
    write_table(table, seed=1)
    after = dataset_dirs(workflow)
    assert len(before) == len(after) == 1 and before != after
    data = config.validate(table_config(tiny_config))["data"]
    data["table"]["sha256"] = fingerprint(table)
    assert after == [config.dataset_id(data)]


@pytest.mark.e2e
def test_a_missing_table_stops_the_workflow_with_its_path(workflow, tiny_config):
    workflow.write_config(table_config(tiny_config))
    done = workflow.run("--dry-run", check=False)
    assert done.returncode != 0 and "data.table.path='data/t.csv': no such file or folder" in done.stdout + done.stderr


@pytest.mark.e2e
def test_a_module_dataset_writes_no_partitions(workflow, tiny_config):
    tiny_config["data"] = {"name": "imgs", "source": "module", "module": "mydata:Images"}
    workflow.write_config(tiny_config)
    # The workflow imports data.module before planning (preflight): it must exist where snakemake runs.
    (workflow.directory / "mydata.py").write_text(
        "import lightning.pytorch as pl\n\n\nclass Images(pl.LightningDataModule):\n    pass\n"
    )
    jobs = workflow.planned_jobs()
    assert jobs.get("data_module") == 1 and "data_partition" not in jobs and "data_table" not in jobs


@pytest.mark.e2e
def test_a_table_split_by_windows_gives_the_same_partitions_and_weights_twice(tmp_path, tiny_config):
    """`snakemake --profile local` on a Parquet table of more rows than one window (2^18), in two working
    directories: the partitions and manifest are byte-identical, and so are the trained weights."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from tests.helpers import Workflow

    rows = 300_000
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(rows, dtype=np.float32), rng.standard_normal(rows, dtype=np.float32)
    config = table_config(tiny_config)
    config["data"]["table"]["path"] = "data/t.parquet"
    config["trainer"] = {"max_epochs": 2, "batch_size": 4096}
    seen = []
    for name in ("first", "second"):
        flow = Workflow(tmp_path / name)
        (flow.directory / "data").mkdir(parents=True)
        table = pa.table({"a": a, "b": b, "y": (a > 0).astype(np.int64)})
        pq.write_table(table, flow.directory / "data" / "t.parquet", row_group_size=50_000)
        flow.write_config(config)
        flow.run()
        (log,) = flow.directory.glob("logs/data/*/ingest.log")
        assert "ingest: window 1 of 1 (300,000 rows in 6 row groups" in log.read_text()
        (data,) = flow.directory.glob("results/data/tbl-*")
        files = {
            p.relative_to(data).as_posix(): p.read_bytes()
            for p in sorted(data.rglob("*"))
            if p.is_file() and not p.name.startswith(".")
        }
        (checkpoint,) = flow.directory.glob("results/runs/*/checkpoints/last.ckpt")
        seen.append((files, torch.load(checkpoint, weights_only=True)["state_dict"]))
    (first, first_weights), (second, second_weights) = seen
    assert "manifest-3.json" in first and first == second
    assert first_weights.keys() == second_weights.keys()
    assert all(torch.equal(first_weights[k], second_weights[k]) for k in first_weights)
