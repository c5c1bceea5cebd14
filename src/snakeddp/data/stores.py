"""The object stores ``data.table.path`` may name, one entry each: its URL schemes, the fsspec package that
reads it, where its credentials and endpoint come from (as the store's own tools read them, never the
config), which listed field changes when an object is written, and which of its client's exceptions mean
"cannot reach" or "refused". snakeddp.data.remote does the listing and reading, the same for every store;
tests/data/test_remote.py, test_remote_s3.py and test_remote_gcs.py run it against a real server of each.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from snakeddp.util.words import listed


@dataclass(frozen=True)
class Store:
    """One kind of object storage."""

    name: str
    schemes: tuple[str, ...]
    package: str
    """The fsspec implementation to import (it registers the schemes), pinned in envs/requirements-dev.lock (and
    pyproject.toml's extra of the store)."""
    shape: str
    """What a URL looks like, for HINTs."""
    holder: str
    """What the store calls the top level of a URL: container, bucket."""
    version: str
    """The field of the package's listing that the service changes whenever an object is written."""
    credentials_hint: str
    endpoint_hint: str
    errors: Callable[[], tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]]
    """(cannot reach, refused): the client's exceptions beyond OSError, imported only when needed."""
    filesystem: str = ""
    """``module:Class`` to read with instead of the class the package registers with fsspec for the scheme."""
    options: Callable[[], dict[str, Any]] = field(default=dict)
    """Keyword arguments for the filesystem, read from the environment each time one is made."""
    client_logger: str = ""
    """A logger on which the package logs the traceback of an error it then raises: quiet while snakeddp lists or
    opens, so the error stays one line."""


def _azure_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    from azure.core.exceptions import AzureError, ServiceRequestError

    return (ServiceRequestError,), (AzureError,)


def _s3_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    import botocore.exceptions as boto

    # boto.ConnectionError: the endpoint refused or timed out the connection; s3fs turns the service's
    # own refusals (403, 404) into OSErrors, and BotoCoreError is the rest: no credentials, no such profile.
    return (boto.ConnectionError,), (boto.BotoCoreError, boto.ClientError)


def _gcs_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    import aiohttp
    import google.auth.exceptions as auth
    from gcsfs.retry import HttpError

    # TransportError: the token endpoint did not answer; gcsfs raises 403 as an OSError, 404 as
    # FileNotFoundError, 401 and other refusals as its HttpError; GoogleAuthError: no or unusable credentials.
    return (aiohttp.ClientConnectionError, auth.TransportError), (HttpError, auth.GoogleAuthError)


def _gcs_options() -> dict[str, Any]:
    # With an emulator, anonymous, as Google's own client (google-cloud-storage) goes to one. Otherwise
    # Application Default Credentials only: gcsfs's own chain ends in anonymous access, which turns a
    # missing credential into a refusal from the bucket after retries instead of one line at once.
    token = "anon" if os.environ.get("STORAGE_EMULATOR_HOST") else "google_default"
    return {"token": token, "access": "read_only"}


AZURE = Store(
    name="Azure Blob Storage",
    schemes=("az", "abfs", "abfss"),
    package="adlfs",
    shape="az://CONTAINER/PATH",
    holder="container",
    version="etag",
    credentials_hint=(
        "HINT: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY "
        "or AZURE_STORAGE_SAS_TOKEN (or sign in for DefaultAzureCredential), in the environment snakemake runs in."
    ),
    endpoint_hint=(
        "HINT: check the network and the account's endpoint (BlobEndpoint in AZURE_STORAGE_CONNECTION_STRING, or "
        "AZURE_STORAGE_ACCOUNT_NAME), then rerun."
    ),
    errors=_azure_errors,
)
S3 = Store(
    name="Amazon S3",
    schemes=("s3",),
    package="s3fs",
    shape="s3://BUCKET/PATH",
    holder="bucket",
    version="ETag",  # as S3 spells it
    credentials_hint=(
        "HINT: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (a profile in ~/.aws/credentials), "
        "for an identity that may list and read the bucket, in the environment snakemake runs in."
    ),
    endpoint_hint=(
        "HINT: check the network and the endpoint (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL for an S3-compatible "
        "store; neither for AWS itself), then rerun."
    ),
    errors=_s3_errors,
)
GCS = Store(
    name="Google Cloud Storage",
    schemes=("gs", "gcs"),
    package="gcsfs",
    shape="gs://BUCKET/PATH",
    holder="bucket",
    # The object's generation, which every write renews (its ETag, on an emulator, is the bytes' MD5).
    version="generation",
    credentials_hint=(
        "HINT: set GOOGLE_APPLICATION_CREDENTIALS to a service account's key file, or run `gcloud auth "
        "application-default login`, for an identity that may list and read the bucket, in the environment "
        "snakemake runs in (STORAGE_EMULATOR_HOST for an emulator, which takes none)."
    ),
    endpoint_hint=(
        "HINT: check the network and the endpoint (STORAGE_EMULATOR_HOST for an emulator; unset for Google Cloud "
        "itself), then rerun."
    ),
    errors=_gcs_errors,
    # gcsfs's registered class (ExtendedGcsFileSystem) first asks the Storage Control API (gRPC, which no
    # emulator serves) for each bucket's layout, and without an answer asks again, with a warning, on every
    # call; this one reads flat and hierarchical-namespace buckets through the JSON API, as the tests do.
    filesystem="gcsfs.core:GCSFileSystem",
    options=_gcs_options,
    client_logger="gcsfs",  # a token that cannot be refreshed: "_request non-retriable exception" and its chain
)
STORES = (AZURE, S3, GCS)


def store_of(scheme: str) -> Store | None:
    return next((store for store in STORES if scheme.lower() in store.schemes), None)


def supported() -> str:
    """The schemes snakeddp reads, for HINTs: "az://, abfs://, abfss://, s3://, gs:// or gcs://"."""
    return listed((f"{scheme}://" for store in STORES for scheme in store.schemes), "or")
