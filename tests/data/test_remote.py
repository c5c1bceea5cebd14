"""Tables in Azure Blob Storage (az://), against a real Azure Storage server: Azurite, started here
(and installed with npm on first use, bench/azurite.py)."""

from __future__ import annotations

import time

import pytest

from bench.azurite import KEY, Azurite, free_port
from snakeddp.data import identity, remote, source, table
from snakeddp.errors import TableError
from tests.helpers import TINY, Workflow, subprocess_env
from tests.storage_checks import FEATURES, check_folder_listing, check_ingest_matches_local, frame, params, parquet

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.dev_venv,  # object stores' file systems (adlfs, s3fs, gcsfs)
    pytest.mark.usefixtures("kept_warm"),
]

CONTAINER = "tables"


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    server = Azurite(tmp_path_factory.mktemp("azurite"))
    yield server
    server.stop()


@pytest.fixture
def credentials(azurite, monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    return azurite


def test_a_folder_lists_its_objects_with_sizes_and_etags_skipping_markers(credentials):
    check_folder_listing(credentials, CONTAINER, "az")


def test_the_identity_follows_the_objects_etags(credentials):
    url = f"az://{CONTAINER}/identity.parquet"
    credentials.upload(CONTAINER, "identity.parquet", parquet(50, 0))
    first = identity.fingerprint(url)
    assert identity.fingerprint(url) == first, "unchanged: the same dataset"
    credentials.upload(CONTAINER, "identity.parquet", parquet(50, 0))
    assert identity.fingerprint(url) != first, "rewritten (even with the same bytes): a new ETag, a new dataset"


def test_ingesting_from_storage_writes_the_partitions_a_local_copy_does(credentials, tmp_path):
    check_ingest_matches_local(credentials, CONTAINER, "az", tmp_path)


def test_csv_objects_are_read_too(credentials, tmp_path):
    credentials.upload(CONTAINER, "csv/a.csv", frame(300, 1).to_csv(index=False).encode())
    summary = table.ingest(params(f"az://{CONTAINER}/csv"), tmp_path / "out")
    assert summary["format"] == "csv" and summary["rows_read"] == 300
    assert summary["files"] == [{"file": f"az://{CONTAINER}/csv/a.csv", "rows": 300}]


@pytest.mark.parametrize("url", [f"az://{CONTAINER}/no-such.parquet", "az://no-such-container/t.parquet"])
def test_a_missing_container_or_object_is_one_line_with_a_hint(credentials, url):
    with pytest.raises(TableError) as caught:
        identity.fingerprint(url)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"data.table.path={url!r}: no such container, object")
    assert "HINT: check the URL" in message


def test_refused_credentials_say_which_variables_to_set(azurite, monkeypatch):
    azurite.upload(CONTAINER, "refused.parquet", parquet(20, 0))
    url = f"az://{CONTAINER}/refused.parquet"
    wrong = azurite.connection_string(key="d3Jvbmcta2V5")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", wrong)
    with pytest.raises(TableError) as caught:
        identity.fingerprint(url)
    message = str(caught.value)
    assert "\n" not in message and "the storage refused" in message and "d3Jvbmcta2V5" not in message
    assert (
        "HINT: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY"
        in message
    )
    # As the HINT says: the account's connection string.
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    assert len(identity.fingerprint(url)) == 64


def test_an_unreachable_endpoint_is_one_line_within_the_listing_time_limit(azurite, monkeypatch):
    azurite.upload(CONTAINER, "reach.parquet", parquet(20, 0))
    url = f"az://{CONTAINER}/reach.parquet"
    closed = azurite.connection_string().replace(f":{azurite.port}/", f":{free_port()}/")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", closed)
    monkeypatch.setattr(remote, "LIST_TIMEOUT_S", 3.0)
    started = time.monotonic()
    with pytest.raises(TableError) as caught:
        identity.fingerprint(url)
    assert time.monotonic() - started < 20, "the SDK's own retries take over a minute"
    message = str(caught.value)
    assert "\n" not in message and "cannot reach the storage" in message and KEY not in message
    assert (
        "HINT: check the network and the account's endpoint (BlobEndpoint in AZURE_STORAGE_CONNECTION_STRING" in message
    )
    # As the HINT says: the endpoint that serves the account.
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    assert len(identity.fingerprint(url)) == 64


def test_other_schemes_are_refused_with_what_is_supported():
    with pytest.raises(
        TableError,
        match=r"hdfs:// is not a storage snakeddp reads. HINT: use az://, abfs://, abfss://, s3://, gs:// or gcs://",
    ):
        source.table_files("hdfs://namenode/t.parquet")
    # A URL's credentials are masked where the line quotes it.
    with pytest.raises(TableError) as refused:
        source.table_files("hdfs://user:PwInHdfs99@namenode/t.parquet?sig=SASSIG123")
    assert "PwInHdfs99" not in str(refused.value) and "SASSIG123" not in str(refused.value)
    assert "'hdfs://***@namenode/t.parquet?sig=***'" in str(refused.value), str(refused.value)


def test_the_pipeline_trains_on_a_table_in_storage_and_reingests_when_it_changes(azurite, tmp_path):
    azurite.upload(CONTAINER, "pipeline/train.parquet", parquet(900, 7))
    flow = Workflow(tmp_path)

    def config(path: str) -> dict:
        source = {"path": path, "features": FEATURES, "label": "y"}
        return {**TINY, "data": {"source": "table", "num_train_files": 3, "num_classes": 1, "table": source}}

    flow.write_config(config(f"az://{CONTAINER}/pipeline/train.parquet"))
    env = subprocess_env(AZURE_STORAGE_CONNECTION_STRING=azurite.connection_string())
    flow.run(env=env)
    assert (tmp_path / "results" / "report" / "report.html").is_file()
    # The key is never written anywhere (results, logs, Snakemake's metadata).
    for path in [*tmp_path.rglob("*")]:
        if path.is_file() and ".snakemake/conda" not in str(path):
            assert KEY.encode() not in path.read_bytes(), path
    assert flow.planned_jobs(env=env) == {}, "unchanged object: nothing to do"

    azurite.upload(CONTAINER, "pipeline/train.parquet", parquet(900, 8))
    planned = flow.planned_jobs(env=env)
    assert planned.get("data_table") == 1 and planned.get("train") == 1, planned

    # A missing object stops the plan in one line, before any job.
    flow.write_config(config(f"az://{CONTAINER}/gone.parquet"))
    done = flow.run("--dry-run", env=env, check=False)
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "no such container, object" in line]
    assert len(lines) == 1 and "HINT: check the URL" in lines[0], done.stdout + done.stderr
