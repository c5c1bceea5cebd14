"""Training beside ingestion (snakeddp.data.stream), through `snakemake --profile local`: a Parquet table of eight
windows trains on partition 0 while ingestion still writes the later ones, and its weights and records equal a
run's whose ingestion had finished first."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import Workflow, subprocess_env

pytestmark = pytest.mark.e2e

# Eight windows of 2^18 rows, one per partition: partition 0 is published after an eighth of the reading. Row groups
# of 256 rows (8,192 of them, 90 MB) make ingestion about 20 s here, twice a run's start on this loaded 2-core machine
# (8-10 s from its job's start to its first step, Lightning's import included).
ROWS, COLUMNS, PARTITIONS, ROW_GROUP = 8 * 2**18, 8, 8, 256


def write_table(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.random.default_rng(0).standard_normal((ROWS, COLUMNS), dtype=np.float32)
    columns = {f"f{i:02d}": x[:, i] for i in range(COLUMNS)}
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({**columns, "y": (x[:, 0] + x[:, 1] > 0).astype(np.int64)})
    pq.write_table(table, path, row_group_size=ROW_GROUP, compression="none", use_dictionary=False)


def streaming_workflow(directory: Path, tiny_config: dict, table: Path) -> Workflow:
    """A working directory whose config trains on ``table`` (linked in: both directories read one file)."""
    flow = Workflow(directory)
    (flow.directory / "data").mkdir(parents=True, exist_ok=True)
    (flow.directory / "data" / "t.parquet").hardlink_to(table)
    tiny_config["data"] = {
        "name": "tbl",
        "source": "table",
        "num_train_files": PARTITIONS,
        "table": {"path": "data/t.parquet", "label": "y"},
    }
    tiny_config["trainer"] = {"max_epochs": 2, "batch_size": 8192}
    flow.write_config(tiny_config)
    return flow


def first_step(provenance: Path) -> float:
    """When the run's first step started (file system clock): its record's write less the time after it."""
    phases = json.loads(provenance.read_text())["timing"]["phases"]
    return provenance.stat().st_mtime - phases["total_s"] + phases["startup_s"]


def trained(flow: Workflow) -> tuple[dict, dict, dict]:
    """The run's data record, its last weights, and the dataset's files by name."""
    import torch

    (provenance,) = flow.directory.glob("results/runs/*/provenance.json")
    (checkpoint,) = flow.directory.glob("results/runs/*/checkpoints/last.ckpt")
    (data,) = flow.directory.glob("results/data/tbl-*")
    files = {  # the machine's own stamps (.handed, .written: inode and ctime) left out
        p.relative_to(data).as_posix(): p.read_bytes()
        for p in sorted(data.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }
    weights = torch.load(checkpoint, weights_only=True)["state_dict"]
    return json.loads(provenance.read_text())["data"], weights, files


def test_training_starts_on_partition_0_while_ingestion_writes_the_rest(tmp_path, tiny_config):
    table = tmp_path / "t.parquet"
    write_table(table)
    streamed = streaming_workflow(tmp_path / "streamed", tiny_config, table)
    jobs = streamed.planned_jobs()
    assert jobs.get("data_stream") == 1 and jobs.get("data_table") == 1, jobs
    streamed.run()
    (log,) = streamed.directory.glob("logs/data/tbl-*/ingest.log")
    assert "ingest: train partition 0 published" in log.read_text()
    (provenance,) = streamed.directory.glob("results/runs/*/provenance.json")
    # The run's own records: its first step came before ingestion's last line (the log's last write).
    assert first_step(provenance) < log.stat().st_mtime, (first_step(provenance), log.stat().st_mtime)

    # The same table, ingested to the end before any training (--until data_manifest), then trained.
    after = streaming_workflow(tmp_path / "after", tiny_config, table)
    after.run("--until", "data_manifest")
    assert not list(after.directory.glob("results/runs/*/provenance.json"))
    after.run()

    (record, weights, files), (record_after, weights_after, files_after) = trained(streamed), trained(after)
    assert files == files_after and f"manifest-{PARTITIONS}.json" in files
    assert weights.keys() == weights_after.keys()
    assert all(np.array_equal(weights[k].numpy(), weights_after[k].numpy()) for k in weights)
    # Both record the dataset's manifest (not the stream manifest they started on), by its bytes' sha256.
    manifest = files[f"manifest-{PARTITIONS}.json"]
    assert record["manifest"].endswith(f"manifest-{PARTITIONS}.json") and record == record_after
    assert record["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
    assert record["partitions"] == PARTITIONS and record["records"] == json.loads(manifest)["records"]
    for flow in (streamed, after):
        done = subprocess.run(
            [flow.bin / "snakeddp", "--results", str(flow.directory / "results"), "verify"],
            capture_output=True, text=True, env=subprocess_env(), check=False, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    # Done: nothing left to run, the stream manifest included; a training parameter edited reruns the run only.
    assert streamed.planned_jobs() == {}
    tiny_config["trainer"]["max_epochs"] = 3
    streamed.write_config(tiny_config)
    jobs = streamed.planned_jobs()
    assert jobs.get("train") == 1 and not [rule for rule in jobs if rule.startswith("data_")], jobs


def test_an_ingestion_that_fails_names_its_invocation_for_the_runs_beside_it(tmp_path, tiny_config):
    """A NaN in the table's first rows fails ingestion in a second. A run already training beside it (its job
    started first) waited 5 minutes for train/, then said no ingestion had begun (tests/data/test_stream.py shows
    the wait now ending at once): that needs the failure named with the invocation every job shares."""
    import pyarrow.parquet as pq

    table = tmp_path / "t.parquet"
    write_table(table)
    rows = pq.read_table(table).to_pandas()
    rows.loc[5, "f00"] = np.nan
    rows.to_parquet(table, row_group_size=ROW_GROUP)
    flow = streaming_workflow(tmp_path / "nan", tiny_config, table)
    done = flow.run(check=False, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "HINT:" in output and "'f00'" in output, output[-3000:]
    assert "no ingestion of the table began" not in output, output[-3000:]
    (failed,) = flow.directory.glob("results/data/tbl-*/.ingest-failed.json")
    assert re.fullmatch("[0-9a-f]{32}", json.loads(failed.read_text())["invocation"]), failed.read_text()
