"""Tables in Google Cloud Storage (gs://), against a real GCS server: gcp-storage-emulator's, started here
(tests/gcs_server.py). The same listing, identity and streaming as az:// (tests/data/test_remote.py), and the
Google side of it: generations, STORAGE_EMULATOR_HOST, Application Default Credentials.

The emulator checks no credentials, so a refused credential (403, 401) cannot be shown here; what is tested is
that a missing or unreadable one stops the listing in one line, and that the chain reads what the HINT says."""

from __future__ import annotations

import json
import sys
import time

import pytest

from bench.azurite import free_port
from snakeddp.data import identity, remote, table
from snakeddp.errors import TableError
from tests.gcs_server import GCSServer
from tests.helpers import TINY, Workflow, subprocess_env
from tests.storage_checks import (
    FEATURES,
    check_folder_listing,
    check_hive_folder_matches_local,
    check_ingest_matches_local,
    frame,
    parquet,
)

pytestmark = pytest.mark.dev_venv  # gcsfs

BUCKET = "tables"
CREDENTIALS_HINT = (
    "HINT: set GOOGLE_APPLICATION_CREDENTIALS to a service account's key file, or run `gcloud auth "
    "application-default login`"
)


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    server = GCSServer(tmp_path_factory.mktemp("gcloud"))
    yield server
    server.stop()


@pytest.fixture
def emulator(gcs, monkeypatch):
    for name, value in gcs.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    return gcs


def service_account_key(path):
    """A service account's key file as the Cloud console writes it, with a key made here."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.write_text(
        json.dumps({
            "type": "service_account", "project_id": "snakeddp-tests", "private_key_id": "1",
            "private_key": pem.decode(), "client_email": "reader@snakeddp-tests.iam.gserviceaccount.com",
            "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token",
        })
    )  # fmt: skip
    return path


def one_line(call) -> str:
    with pytest.raises(TableError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_folder_lists_its_objects_with_sizes_and_generations_skipping_markers(emulator):
    check_folder_listing(emulator, BUCKET, "gs")


def test_the_identity_follows_the_objects_generations(emulator):
    url = f"gs://{BUCKET}/identity.parquet"
    emulator.upload(BUCKET, "identity.parquet", parquet(50, 0))
    first = identity.fingerprint(url)
    assert identity.fingerprint(url) == first, "unchanged: the same dataset"
    assert identity.fingerprint(url.replace("gs://", "gcs://")) == first, "gcs:// names the same objects"
    emulator.upload(BUCKET, "identity.parquet", parquet(50, 0))
    assert identity.fingerprint(url) != first, "rewritten (even with the same bytes): a new generation, a new dataset"


def test_ingesting_from_gcs_writes_the_partitions_a_local_copy_does(emulator, tmp_path):
    check_ingest_matches_local(emulator, BUCKET, "gs", tmp_path)


def test_a_hive_layout_folder_in_gs_ingests_as_its_local_copy(emulator, tmp_path):
    check_hive_folder_matches_local(emulator, BUCKET, "gs", tmp_path)


def test_csv_objects_are_read_too(emulator, tmp_path):
    from tests.data.test_remote import params

    emulator.upload(BUCKET, "csv/a.csv", frame(300, 1).to_csv(index=False).encode())
    summary = table.ingest(params(f"gs://{BUCKET}/csv"), tmp_path / "out")
    assert summary["format"] == "csv" and summary["rows_read"] == 300
    assert summary["files"] == [{"file": f"gs://{BUCKET}/csv/a.csv", "rows": 300}]


@pytest.mark.parametrize("url", [f"gs://{BUCKET}/no-such.parquet", "gs://no-such-bucket/t.parquet"])
def test_a_missing_bucket_or_object_is_one_line_with_a_hint(emulator, url):
    emulator.upload(BUCKET, "present.parquet", parquet(20, 0))
    message = one_line(lambda: identity.fingerprint(url))
    assert message.startswith(f"data.table.path={url!r}: no such bucket, object or folder")
    assert "HINT: check the URL (gs://BUCKET/PATH)" in message


def test_missing_or_unreadable_credentials_say_what_to_set(emulator, monkeypatch, caplog):
    emulator.upload(BUCKET, "credentials.parquet", parquet(20, 0))
    url = f"gs://{BUCKET}/credentials.parquet"
    # Google Cloud itself (no emulator) with no credentials anywhere: refused at once, not anonymously later.
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    message = one_line(lambda: identity.fingerprint(url))
    assert "the storage refused (DefaultCredentialsError: Your default credentials were not found" in message
    assert CREDENTIALS_HINT in message
    missing = emulator.home / "no-such-key.json"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(missing))
    message = one_line(lambda: identity.fingerprint(url))
    assert f"(DefaultCredentialsError: File {missing} was not found" in message and CREDENTIALS_HINT in message
    # As the HINT says, a service account's key file, or what `gcloud auth application-default login` writes,
    # is found: no longer "not found", but the token cannot be fetched here, where Google's token endpoint is
    # not reachable, so the listing stops a step later (and the secrets stay out of the line).
    monkeypatch.setattr(remote, "LIST_TIMEOUT_S", 3.0)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(service_account_key(emulator.home / "key.json")))
    message = one_line(lambda: identity.fingerprint(url))
    assert "DefaultCredentialsError" not in message and "PRIVATE KEY" not in message
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    login = {"type": "authorized_user", "client_id": "id", "client_secret": "s3cr3t-of-the-login", "refresh_token": "r"}
    (emulator.home / "gcloud").mkdir(exist_ok=True)
    (emulator.home / "gcloud" / "application_default_credentials.json").write_text(json.dumps(login))
    caplog.clear()
    message = one_line(lambda: identity.fingerprint(url))
    assert "DefaultCredentialsError" not in message and "s3cr3t-of-the-login" not in message
    assert [r.getMessage() for r in caplog.records if r.name.startswith("gcsfs")] == [], "gcsfs's traceback, hushed"
    # ... and STORAGE_EMULATOR_HOST for an emulator.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.endpoint)
    assert len(identity.fingerprint(url)) == 64


def test_an_unreachable_endpoint_is_one_line_and_the_emulator_variable_fixes_it(emulator, monkeypatch):
    emulator.upload(BUCKET, "reach.parquet", parquet(20, 0))
    url = f"gs://{BUCKET}/reach.parquet"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr(remote, "LIST_TIMEOUT_S", 3.0)  # gcsfs's own retries back off for over 30 s
    started = time.monotonic()
    message = one_line(lambda: identity.fingerprint(url))
    assert time.monotonic() - started < 10
    assert "cannot reach the storage (" in message
    assert "HINT: check the network and the endpoint (STORAGE_EMULATOR_HOST for an emulator" in message
    # As the HINT says: the emulator's address.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.endpoint)
    assert len(identity.fingerprint(url)) == 64


def test_without_gcsfs_the_hint_names_the_package_to_install(emulator, monkeypatch):
    emulator.upload(BUCKET, "package.parquet", parquet(20, 0))
    url = f"gs://{BUCKET}/package.parquet"
    with monkeypatch.context() as without:
        without.setitem(sys.modules, "gcsfs", None)  # what an environment without it imports
        message = one_line(lambda: identity.fingerprint(url))
    assert "needs the gcsfs package, which is not installed here. HINT: run `tools/add.sh gcsfs --stage data`" in (
        message
    )
    # As the HINT says: with gcsfs installed.
    assert len(identity.fingerprint(url)) == 64


@pytest.mark.e2e
def test_the_pipeline_trains_on_a_table_in_gcs_and_reingests_when_it_is_rewritten(gcs, tmp_path):
    gcs.upload(BUCKET, "pipeline/train.parquet", parquet(900, 7))
    flow = Workflow(tmp_path)
    source = {"path": f"gs://{BUCKET}/pipeline/train.parquet", "features": FEATURES, "label": "y"}
    data = {"source": "table", "num_train_files": 3, "num_classes": 1, "table": source}
    flow.write_config({**TINY, "trainer": {**TINY["trainer"], "max_epochs": 1}, "data": data})
    env = subprocess_env(**gcs.env())
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    flow.run(env=env)
    assert (tmp_path / "results" / "report" / "report.html").is_file()

    # The same bytes written again: a new generation, so ingestion and training rerun. (That an unchanged
    # object plans nothing is the same code for every store: the az:// and s3:// pipeline tests check it.)
    gcs.upload(BUCKET, "pipeline/train.parquet", parquet(900, 7))
    planned = flow.planned_jobs(env=env)
    assert planned.get("data_table") == 1 and planned.get("train") == 1, planned
