"""snakeddp.data.delta: Delta Lake tables written by delta-rs itself, read locally and from a real Azure
Storage server (Azurite), as a table dataset's source: version and table id as the identity, time travel,
and ingestion byte-identical to the same rows read as plain Parquet."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake

from bench.azurite import Azurite
from snakeddp.data import delta, plan, table
from snakeddp.errors import ConfigError, TableError
from tests.helpers import TINY, Workflow, subprocess_env
from tests.storage_checks import FEATURES, frame, params

CONTAINER = "lake"


def two_commits(path: Path | str, **options) -> None:
    """A Delta table with version 0 (300 rows) and version 1 (300 more, appended)."""
    write_deltalake(str(path), frame(300, 1), **options)
    write_deltalake(str(path), frame(300, 2), mode="append", **options)


def partitions(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.safetensors"))}


def test_the_latest_version_or_a_pinned_one_is_what_the_workflow_plans(tmp_path):
    two_commits(tmp_path / "churn")
    latest = table.delta_snapshot(params(str(tmp_path / "churn"))["table"])
    assert latest.version == 1 and len(latest.files) == 2
    assert latest.table_id == DeltaTable(str(tmp_path / "churn")).metadata().id
    first = table.delta_snapshot({**params(str(tmp_path / "churn"))["table"], "version": 0})
    assert (first.version, len(first.files), first.table_id) == (0, 1, latest.table_id)
    assert first.identity() != latest.identity()
    runs = {"r": {"config": {"data": params(str(tmp_path / "churn"))}}}
    plan.resolve_tables(runs, tmp_path / "cache.json")
    resolved = runs["r"]["config"]["data"]["table"]
    assert (resolved["version"], resolved["table_id"], resolved["sha256"]) == (1, latest.table_id, latest.identity())
    assert plan.input_files(runs["r"]["config"]["data"]) == []


def test_a_version_ingests_its_own_rows_as_the_same_files_read_as_parquet_would(tmp_path):
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
        (
            {"path": str(tmp_path / "churn"), "version": 7},
            "cannot read the Delta table at version 7",
            "HINT: check the path",
        ),
        ({"path": str(tmp_path / "churn"), "table_id": "another"}, "data.table.table_id pins another", "HINT: point"),
    ]
    for given, what, hint in cases:
        runs = {"r": {"config": {"data": {**params(""), "table": {**params("")["table"], **given}}}}}
        with pytest.raises(ConfigError) as refused:
            plan.resolve_tables(runs, tmp_path / "cache.json")
        (line,) = str(refused.value).splitlines()
        assert line.startswith("run r: ") and what in line and hint in line, line


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
    remote_snapshot = table.delta_snapshot(params(url)["table"])
    assert remote_snapshot.version == 1
    from_store = table.ingest(params(url), tmp_path / "remote", chunk_rows=64)
    local = table.ingest(params(str(tmp_path / "same")), tmp_path / "local", chunk_rows=64)
    assert from_store["rows_read"] == local["rows_read"] == 600
    assert partitions(tmp_path / "remote") == partitions(tmp_path / "local")


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
