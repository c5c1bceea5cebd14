"""snakeddp.data.delta: Delta Lake tables written by delta-rs itself, read locally and from a real Azure
Storage server (Azurite), as a table dataset's source: version and table id as the identity, time travel,
ingestion byte-identical to the same rows read as plain Parquet, partition columns from the log, and
columns a later commit added. Beside them, a hive-layout Parquet folder in the same storage, and the
pipeline trained on both kinds of partitioned table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from bench.azurite import Azurite
from snakeddp.config import parts
from snakeddp.data import delta, plan, split, table
from snakeddp.data.partitions import read_partition
from snakeddp.errors import ConfigError, TableError
from snakeddp.util.hashing import sha256_json
from tests.helpers import TINY, Workflow, subprocess_env
from tests.storage_checks import (
    FEATURES,
    check_hive_folder_matches_local,
    frame,
    hive_folder,
    params,
    upload_folder,
)

pytestmark = pytest.mark.dev_venv  # deltalake, and adlfs for Azurite

CONTAINER = "lake"


def two_commits(path: Path | str, **options) -> None:
    """A Delta table with version 0 (300 rows) and version 1 (300 more, appended)."""
    write_deltalake(str(path), frame(300, 1), **options)
    write_deltalake(str(path), frame(300, 2), mode="append", **options)


def partitions(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.safetensors"))}


def by_region(path: Path, partition_by: list[str] | None = None) -> None:
    """Three commits of 200 rows, the rows of region 0, 1, then 2 (x3, a feature), at site "north east"
    (not a feature, a name to escape). Partitioned by both, each commit writes one data file holding
    neither: their values are in the folders' names and in the log."""
    for region in range(3):
        rows = frame(200, region).assign(x3=region, site="north east")
        write_deltalake(str(path), rows, mode="append", partition_by=partition_by)


def rows_of(out: Path) -> list:
    """Every (id, features, label) ingested into ``out``, read back by snakeddp's own partition reader."""
    found = []
    for name in ["val", *(f"train/part-{i:05d}" for i in range(3))]:
        part = read_partition(out / f"{name}.safetensors")
        found += zip(part.ids.tolist(), map(tuple, part.features.tolist()), part.labels[:, 0].tolist(), strict=True)
    return sorted(found)


def test_the_latest_version_or_a_pinned_one_is_what_the_workflow_plans(tmp_path):
    two_commits(tmp_path / "churn")
    latest = table.delta_snapshot(parts.Table.of(params(str(tmp_path / "churn"))["table"]))
    assert latest.version == 1 and len(latest.files) == 2
    assert latest.table_id == DeltaTable(str(tmp_path / "churn")).metadata().id
    first = table.delta_snapshot(parts.Table.of({**params(str(tmp_path / "churn"))["table"], "version": 0}))
    assert (first.version, len(first.files), first.table_id) == (0, 1, latest.table_id)
    assert first.identity() != latest.identity()
    runs = {"r": {"config": {"data": params(str(tmp_path / "churn"))}}}
    plan.resolve_tables(runs, tmp_path / "cache.json")
    resolved = runs["r"]["config"]["data"]["table"]
    assert (resolved["version"], resolved["table_id"], resolved["sha256"]) == (1, latest.table_id, latest.identity())
    assert plan.input_files(runs["r"]["config"]["data"]) == []


@pytest.fixture(params=["global", "windows"])
def split_by(request, monkeypatch) -> str:
    """Each test of a Delta version's rows under both splits: windows of 100 rows make its 300-row data files
    (one row group each) windows of their own."""
    if request.param == "windows":
        monkeypatch.setattr(split, "WINDOW_ROWS", 100)
    return request.param


def test_a_version_ingests_its_own_rows_as_the_same_files_read_as_parquet_would(tmp_path, split_by):
    two_commits(tmp_path / "churn")
    at_zero = {**params(str(tmp_path / "churn")), "table": {**params("")["table"], "path": str(tmp_path / "churn")}}
    at_zero["table"]["version"] = 0
    summary = table.ingest(at_zero, tmp_path / "v0", chunk_rows=64)
    assert summary["rows_read"] == 300 and summary["delta"]["version"] == 0
    everything = table.ingest(params(str(tmp_path / "churn")), tmp_path / "v1", chunk_rows=64)
    assert everything["rows_read"] == 600 and everything["delta"]["version"] == 1
    # The same data files as a plain Parquet folder (without the log): byte-identical partitions.
    plain = tmp_path / "plain"
    plain.mkdir()
    for i, (name, _) in enumerate(delta.open_snapshot(tmp_path / "churn", None).files):
        shutil.copy(tmp_path / "churn" / name, plain / f"part-{i:03d}.parquet")  # named in commit order
    as_parquet = table.ingest(params(str(plain)), tmp_path / "parquet", chunk_rows=64)
    assert as_parquet["rows_read"] == 600
    assert (
        everything["split"]
        == as_parquet["split"]
        == ("global" if split_by == "global" else {"windows": 2, "window_rows": 100})
    )
    assert partitions(tmp_path / "v1") == partitions(tmp_path / "parquet")


def test_what_pins_a_delta_table_is_refused_in_one_line_when_it_does_not_fit(tmp_path):
    two_commits(tmp_path / "churn")
    (tmp_path / "t.csv").write_text("x1,x2,x3,y\n1,2,3,0\n")
    cases = [
        (
            {"path": str(tmp_path / "t.csv"), "version": 0},
            "data.table.version is set, and",
            "HINT: remove data.table.version",
        ),
        ({"path": str(tmp_path / "churn"), "table_id": "another"}, "data.table.table_id pins another", "HINT: point"),
    ]
    for given, what, hint in cases:
        runs = {"r": {"config": {"data": {**params(""), "table": {**params("")["table"], **given}}}}}
        with pytest.raises(ConfigError) as refused:
            plan.resolve_tables(runs, tmp_path / "cache.json")
        (line,) = str(refused.value).splitlines()
        assert line.startswith("run r: ") and what in line and hint in line, line


def test_a_version_the_table_does_not_have_names_those_it_has_when_the_workflow_plans(tmp_path):
    two_commits(tmp_path / "churn")
    path = str(tmp_path / "churn")

    def planned(**given) -> dict:
        runs = {"r": {"config": {"data": {**params(path), "table": {**params(path)["table"], **given}}}}}
        plan.resolve_tables(runs, tmp_path / "cache.json")
        return runs["r"]["config"]["data"]["table"]

    with pytest.raises(ConfigError) as refused:
        planned(version=7)
    (line,) = str(refused.value).splitlines()
    assert line == (
        f"run r: data.table.path={path!r}: the Delta table has no version 7; it has versions 0 to 1 (latest: 1). "
        "HINT: set data.table.version to one it has (0 to 1), or remove data.table.version to train on the latest."
    )
    # The HINT followed: a version it has is planned, and without one the latest is.
    assert planned(version=0)["version"] == 0
    assert planned()["version"] == 1
    # A version log retention removed (a checkpoint at version 2, the commits before it gone) is said as such.
    write_deltalake(path, frame(300, 3), mode="append")
    DeltaTable(path).create_checkpoint()
    for version in range(2):
        (tmp_path / "churn" / "_delta_log" / f"{version:020d}.json").unlink()
    with pytest.raises(ConfigError) as refused:
        planned(version=0)
    assert "no version 0 (VACUUM or log retention removed it); it has version 2 only (latest: 2)." in str(refused.value)


def test_a_missing_deltalake_names_the_command_that_installs_it_to_stay(monkeypatch, tmp_path):
    import builtins

    real = builtins.__import__

    def without_deltalake(name, *args, **kwargs):
        if name == "deltalake":
            raise ImportError("No module named 'deltalake'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_deltalake)
    with pytest.raises(
        TableError, match=r"needs the deltalake package.*HINT: run `tools/add.sh deltalake --stage data`"
    ):
        delta.open_snapshot(tmp_path, None)


def test_a_table_partitioned_by_a_feature_ingests_as_the_same_commits_unpartitioned(tmp_path, split_by):
    by_region(tmp_path / "partitioned", partition_by=["x3", "site"])
    by_region(tmp_path / "flat")
    snapshot = delta.open_snapshot(tmp_path / "partitioned", None)
    assert [dict(v) for v in snapshot.partition_values] == [{"x3": r, "site": "north east"} for r in range(3)]
    assert snapshot.identity() == sha256_json(
        {"delta_table_id": snapshot.table_id, "version": 2, "files": snapshot.files}
    ), "partition values and columns are not in the identity: tables that worked before keep their dataset"
    first = delta.data_files(tmp_path / "partitioned", snapshot)[0]
    assert first.parent.name == "site=north%20east" and pq.read_schema(first).names == ["x1", "x2", "y"]
    summary = table.ingest(params(str(tmp_path / "partitioned")), tmp_path / "out", chunk_rows=64)
    table.ingest(params(str(tmp_path / "flat")), tmp_path / "flat-out", chunk_rows=64)
    assert summary["rows_read"] == 600 and sum(summary["records"].values()) == 600
    assert summary["split"] == ("global" if split_by == "global" else {"windows": 3, "window_rows": 100})
    assert partitions(tmp_path / "out") == partitions(tmp_path / "flat-out")
    found = rows_of(tmp_path / "out")
    assert [i for i, _, _ in found] == list(range(600))
    assert all(features[2] == i // 200 for i, features, _ in found), "x3 from the log: region 0, 1, 2 by commit"


def test_a_text_partition_column_is_a_category_as_it_is_inside_the_files(tmp_path):
    """A string column the table is partitioned by lives only in the log, typed by the schema: one-hot as
    the same column stored in the data files is, with no data.table.categories needed."""
    for name, partition_by in (("partitioned", ["site"]), ("flat", None)):
        for region, site in enumerate(["north", "south", "north"]):
            rows = frame(200, region).assign(site=site)
            write_deltalake(str(tmp_path / name), rows, mode="append", partition_by=partition_by)
    with_site = {**params(""), "table": {**params("")["table"], "features": [*FEATURES, "site"]}}
    summaries = {}
    for name in ("partitioned", "flat"):
        given = {**with_site, "table": {**with_site["table"], "path": str(tmp_path / name)}}
        summaries[name] = table.ingest(given, tmp_path / f"{name}-out", chunk_rows=64)
    assert summaries["partitioned"]["task"] == summaries["flat"]["task"]
    assert summaries["partitioned"]["task"]["num_features"] == len(FEATURES) + 2, "site: one slot per value"
    assert partitions(tmp_path / "partitioned-out") == partitions(tmp_path / "flat-out")


def test_a_null_partition_value_is_missing_and_nan_policy_decides(tmp_path):
    rows = frame(300, 1)
    rows["x3"] = pd.array([0, 1, None] * 100, dtype="Int64")
    write_deltalake(str(tmp_path / "t"), rows, partition_by=["x3"])  # one commit, three data files
    with pytest.raises(TableError) as refused:
        table.ingest(params(str(tmp_path / "t")), tmp_path / "out")
    (line,) = str(refused.value).splitlines()
    assert "x3=__HIVE_DEFAULT_PARTITION__/" in line and "column 'x3', row 1: missing or non-finite value" in line
    assert line.endswith("HINT: clean the table, or set data.table.nan_policy: drop to skip such rows.")
    dropping = params(str(tmp_path / "t"))
    dropping["table"]["nan_policy"] = "drop"
    summary = table.ingest(dropping, tmp_path / "out")
    assert (summary["rows_read"], summary["rows_dropped"], sum(summary["records"].values())) == (300, 100, 200)
    # Files of one commit are read in the log's order, not the rows': compare what arrived as a set.
    kept = rows.dropna().astype({"x3": float})[[*FEATURES, "y"]].to_numpy(np.float32)
    assert sorted((tuple(f), y) for _, f, y in rows_of(tmp_path / "out")) == sorted(
        (tuple(r[:3]), r[3]) for r in kept.tolist()
    )


def evolved(path: Path) -> None:
    """Versions 0 and 1 without x3; version 2 adds it (schema_mode merge); version 3 appends with it."""
    write_deltalake(str(path), frame(100, 1).drop(columns="x3"))
    write_deltalake(str(path), frame(100, 2).drop(columns="x3"), mode="append")
    write_deltalake(str(path), frame(100, 3), mode="append", schema_mode="merge")
    write_deltalake(str(path), frame(100, 4), mode="append")


def test_a_column_a_later_commit_added_is_null_in_older_rows_and_nan_policy_decides(tmp_path):
    evolved(tmp_path / "t")
    with pytest.raises(TableError) as refused:
        table.ingest(params(str(tmp_path / "t")), tmp_path / "out")
    (line,) = str(refused.value).splitlines()
    assert "(Delta table, version 3): data file " in line and "has no column 'x3', which version 2 added;" in line
    assert "HINT: set data.table.nan_policy: drop" in line and "SET x3 = ... WHERE x3 IS NULL), then rerun." in line
    dropping = params(str(tmp_path / "t"))
    dropping["table"]["nan_policy"] = "drop"
    summary = table.ingest(dropping, tmp_path / "out")
    assert (summary["rows_read"], summary["rows_dropped"]) == (400, 200)
    assert [i for i, _, _ in rows_of(tmp_path / "out")] == list(range(200, 400)), "the older commits' rows"
    unknown = params(str(tmp_path / "t"))
    unknown["table"]["features"] = ["x1", "x9"]
    with pytest.raises(TableError) as refused:
        table.ingest(unknown, tmp_path / "out")
    assert str(refused.value).startswith(
        f"data.table.path={str(tmp_path / 't')!r} (Delta table, version 3): no column 'x9' (the table has: x1, x2, "
        "y, x3). HINT: fix data.table.features"
    ), "the table, not one of its files"


def test_when_log_retention_removed_the_commit_that_added_a_column_the_error_says_so(tmp_path):
    evolved(tmp_path / "t")
    DeltaTable(str(tmp_path / "t")).create_checkpoint()
    for version in range(3):  # what log retention leaves after a checkpoint at version 3
        (tmp_path / "t" / "_delta_log" / f"{version:020d}.json").unlink()
    with pytest.raises(TableError) as refused:
        table.ingest(params(str(tmp_path / "t")), tmp_path / "out")
    (line,) = str(refused.value).splitlines()
    assert "which the table has by version 3 (the log no longer has version 2: log retention" in line, line


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    server = Azurite(tmp_path_factory.mktemp("azurite"))
    server.upload(CONTAINER, "README", b"a container for the Delta tables")
    yield server
    server.stop()


@pytest.mark.e2e
def test_a_delta_table_in_azure_storage_reads_as_the_local_one(azurite, tmp_path, monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    url = f"az://{CONTAINER}/same"
    options = delta.storage_options(url)
    assert options["endpoint"] == azurite.endpoint and options["allow_http"] == "true"
    two_commits(f"abfs://{CONTAINER}/same", storage_options=options)
    two_commits(tmp_path / "same")
    remote_snapshot = table.delta_snapshot(parts.Table.of(params(url)["table"]))
    assert remote_snapshot.version == 1
    from_store = table.ingest(params(url), tmp_path / "remote", chunk_rows=64)
    local = table.ingest(params(str(tmp_path / "same")), tmp_path / "local", chunk_rows=64)
    assert from_store["rows_read"] == local["rows_read"] == 600
    assert partitions(tmp_path / "remote") == partitions(tmp_path / "local")


@pytest.mark.e2e
def test_partitioned_tables_in_azure_storage_read_as_their_local_copies(azurite, tmp_path, monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    by_region(tmp_path / "local", partition_by=["x3", "site"])
    several = frame(300, 5).assign(x3=np.arange(300) % 3, site="north east")
    write_deltalake(str(tmp_path / "local"), several, mode="append")  # one commit, three data files
    upload_folder(azurite, CONTAINER, "partitioned", tmp_path / "local")  # a copy: the same log
    from_store = table.ingest(params(f"az://{CONTAINER}/partitioned"), tmp_path / "remote", chunk_rows=64)
    local = table.ingest(params(str(tmp_path / "local")), tmp_path / "local-out", chunk_rows=64)
    assert from_store["rows_read"] == local["rows_read"] == 900
    assert partitions(tmp_path / "remote") == partitions(tmp_path / "local-out")
    check_hive_folder_matches_local(azurite, CONTAINER, "az", tmp_path)


@pytest.mark.e2e
def test_the_pipeline_trains_on_a_delta_table_partitioned_by_a_feature_and_on_a_hive_folder(tmp_path):
    """Both kinds in one invocation, a sweep over data.table.path (paths relative to the directory
    snakemake runs in): each run's own dataset holds every row of its table once, with its partition
    column's values."""
    flow = Workflow(tmp_path / "flow")
    flow.directory.mkdir()
    by_region(flow.directory / "tables" / "delta", partition_by=["x3", "site"])
    hive = hive_folder(flow.directory / "tables" / "hive", 600, 4)
    expected = {"delta": np.arange(600) // 200, "hive": hive["x3"].to_numpy()}
    # The base config names one of them, as data.source: table needs; the sweep names both.
    source = {"path": "tables/delta", "features": FEATURES, "label": "y"}
    data = {"source": "table", "num_train_files": 3, "num_classes": 1, "table": source}
    flow.write_config({**TINY, "data": data, "sweep": {"data.table.path": ["tables/delta", "tables/hive"]}})
    flow.run()
    datasets = set()
    for kind in ("delta", "hive"):
        run = flow.directory / "results" / "runs" / f"path-tables{kind}"
        assert (run / "provenance.json").is_file(), f"{kind}: trained"
        dataset = json.loads((run / "provenance.json").read_text())["data"]["dataset"]
        datasets.add(dataset)
        parts = [
            read_partition(p) for p in sorted((flow.directory / "results" / "data" / dataset).rglob("*.safetensors"))
        ]
        ids = np.concatenate([p.ids.numpy() for p in parts])
        assert sorted(ids.tolist()) == list(range(600)), f"{kind}: every row in one partition"
        x3 = np.concatenate([p.features.numpy()[:, 2] for p in parts])
        assert np.array_equal(x3, expected[kind][ids]), f"{kind}: the partition column's values"
    assert len(datasets) == 2, "a dataset of its own for each table"


@pytest.mark.e2e
def test_the_pipeline_trains_a_pinned_version_and_a_new_commit_replans_ingestion(tmp_path):
    two_commits(tmp_path / "churn")
    (tmp_path / "flow").mkdir()
    flow = Workflow(tmp_path / "flow")

    def config(**pin) -> dict:
        source = {"path": str(tmp_path / "churn"), "features": FEATURES, "label": "y", **pin}
        return {**TINY, "data": {"source": "table", "num_train_files": 3, "num_classes": 1, "table": source}}

    flow.write_config(config(version=0))
    flow.run()
    record = (flow.directory / "results" / "runs" / "base" / "provenance.json").read_text()
    assert '"version": 0' in record and DeltaTable(str(tmp_path / "churn")).metadata().id in record
    write_deltalake(str(tmp_path / "churn"), frame(300, 3), mode="append")
    assert flow.planned_jobs() == {}, "a pinned version: a new commit changes nothing"
    flow.write_config(config())
    planned = flow.planned_jobs(env=subprocess_env())
    assert planned.get("data_table") == 1 and planned.get("train") == 1, planned
