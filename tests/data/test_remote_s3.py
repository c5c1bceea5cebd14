"""Tables in Amazon S3 (s3://), against a real S3 server: moto's, started here with authentication on
(tests/s3_server.py). The same listing, identity and streaming as az:// (tests/data/test_remote.py), and
the AWS side of it: the credential chain, AWS_ENDPOINT_URL(_S3), S3's errors."""

from __future__ import annotations

import sys
import time

import pytest

from snakeddp.data import identity, remote
from snakeddp.errors import TableError
from tests.helpers import TINY, Workflow, subprocess_env
from tests.mlflow_server import free_port
from tests.s3_server import S3Server
from tests.storage_checks import (
    FEATURES,
    check_folder_listing,
    check_hive_folder_matches_local,
    check_ingest_matches_local,
    parquet,
)

pytestmark = pytest.mark.dev_venv  # s3fs, and an mlflow server

BUCKET = "tables"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("aws"))
    yield server
    server.stop()


@pytest.fixture
def credentials(s3, monkeypatch):
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    return s3


def one_line(call) -> str:
    with pytest.raises(TableError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_folder_lists_its_objects_with_sizes_and_etags_skipping_markers(credentials):
    check_folder_listing(credentials, BUCKET, "s3")


def test_the_identity_follows_the_objects_etags(credentials):
    url = f"s3://{BUCKET}/identity.parquet"
    credentials.upload(BUCKET, "identity.parquet", parquet(50, 0))
    first = identity.fingerprint(url)
    assert identity.fingerprint(url) == first, "unchanged: the same dataset"
    credentials.upload(BUCKET, "identity.parquet", parquet(50, 1))
    assert identity.fingerprint(url) != first, "new bytes: a new ETag, a new dataset"


def test_ingesting_from_s3_writes_the_partitions_a_local_copy_does(credentials, tmp_path):
    check_ingest_matches_local(credentials, BUCKET, "s3", tmp_path)


def test_a_hive_layout_folder_in_s3_ingests_as_its_local_copy(credentials, tmp_path):
    check_hive_folder_matches_local(credentials, BUCKET, "s3", tmp_path)


@pytest.mark.parametrize("url", [f"s3://{BUCKET}/no-such.parquet", "s3://no-such-bucket/t.parquet"])
def test_a_missing_bucket_or_object_is_one_line_with_a_hint(credentials, url):
    credentials.upload(BUCKET, "present.parquet", parquet(20, 0))
    message = one_line(lambda: identity.fingerprint(url))
    assert message.startswith(f"data.table.path={url!r}: no such bucket, object or folder")
    assert "HINT: check the URL (s3://BUCKET/PATH)" in message


def test_refused_or_missing_credentials_say_which_variables_to_set(credentials, monkeypatch):
    credentials.upload(BUCKET, "refused.parquet", parquet(20, 0))
    url = f"s3://{BUCKET}/refused.parquet"
    hint = "HINT: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (a profile in ~/.aws/credentials)"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    message = one_line(lambda: identity.fingerprint(url))
    assert "the storage refused (PermissionError" in message and hint in message and "wrong-secret" not in message
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    message = one_line(lambda: identity.fingerprint(url))
    assert "the storage refused (NoCredentialsError" in message and hint in message
    # As the HINT says: the key in a profile of the credentials file, named by AWS_PROFILE...
    (credentials.home / "credentials").write_text(
        f"[team]\naws_access_key_id = {credentials.key_id}\naws_secret_access_key = {credentials.secret}\n"
    )
    monkeypatch.setenv("AWS_PROFILE", "team")
    assert len(identity.fingerprint(url)) == 64
    # ... or in the variables.
    monkeypatch.delenv("AWS_PROFILE")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", credentials.key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", credentials.secret)
    assert len(identity.fingerprint(url)) == 64


def test_an_unreachable_endpoint_is_one_line_and_the_s3_endpoint_variable_fixes_it(credentials, monkeypatch):
    credentials.upload(BUCKET, "reach.parquet", parquet(20, 0))
    url = f"s3://{BUCKET}/reach.parquet"
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    with monkeypatch.context() as short:
        # botocore's own retries take 11 s here; the listing that must succeed below keeps the real limit (3 s
        # was too short for moto's answer on a loaded 2-core machine).
        short.setattr(remote, "LIST_TIMEOUT_S", 3.0)
        started = time.monotonic()
        message = one_line(lambda: identity.fingerprint(url))
        assert time.monotonic() - started < 10
    assert "cannot reach the storage (" in message and credentials.secret not in message
    assert "HINT: check the network and the endpoint (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL" in message
    # As the HINT says: S3's own endpoint variable (which wins over the general one).
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", credentials.endpoint)
    assert len(identity.fingerprint(url)) == 64


def test_without_s3fs_the_hint_names_the_package_to_install(credentials, monkeypatch):
    credentials.upload(BUCKET, "package.parquet", parquet(20, 0))
    url = f"s3://{BUCKET}/package.parquet"
    with monkeypatch.context() as without:
        without.setitem(sys.modules, "s3fs", None)  # what an environment without it imports
        message = one_line(lambda: identity.fingerprint(url))
    assert "needs the s3fs package, which is not installed here. HINT: run `tools/add.sh s3fs --stage data`" in message
    # As the HINT says: with s3fs installed.
    assert len(identity.fingerprint(url)) == 64


@pytest.mark.e2e
def test_the_pipeline_trains_on_a_table_in_s3_and_reingests_when_it_changes(s3, tmp_path):
    s3.upload(BUCKET, "pipeline/train.parquet", parquet(900, 7))
    flow = Workflow(tmp_path)

    def config(path: str) -> dict:
        source = {"path": path, "features": FEATURES, "label": "y"}
        data = {"source": "table", "num_train_files": 3, "num_classes": 1, "table": source}
        return {**TINY, "trainer": {**TINY["trainer"], "max_epochs": 1}, "data": data}

    flow.write_config(config(f"s3://{BUCKET}/pipeline/train.parquet"))
    env = subprocess_env(**s3.env())
    flow.run(env=env)
    assert (tmp_path / "results" / "report" / "report.html").is_file()
    # The secret key is never written anywhere (results, logs, Snakemake's metadata).
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert s3.secret.encode() not in path.read_bytes(), path
    assert flow.planned_jobs(env=env) == {}, "unchanged object: nothing to do"

    s3.upload(BUCKET, "pipeline/train.parquet", parquet(900, 8))
    planned = flow.planned_jobs(env=env)
    assert planned.get("data_table") == 1 and planned.get("train") == 1, planned

    # A missing bucket stops the plan in one line, before any job.
    flow.write_config(config("s3://no-such-bucket/train.parquet"))
    done = flow.run("--dry-run", env=env, check=False)
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "no such bucket, object" in line]
    assert len(lines) == 1 and "HINT: check the URL (s3://BUCKET/PATH)" in lines[0], done.stdout + done.stderr
