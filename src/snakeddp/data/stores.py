"""The object stores ``data.table.path`` may name, one entry each: its URL schemes, the fsspec package that
reads it, where its credentials and endpoint come from (as the store's own tools read them, never the
config), and which of its client's exceptions mean "cannot reach" or "refused". snakeddp.data.remote
does the listing and reading, the same for every store.

gs:// is not here: no Google Cloud Storage server that gcsfs could be tested against is installed with
the project (tests/data/test_remote.py and test_remote_s3.py run the other two against real servers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Store:
    """One kind of object storage."""

    name: str
    schemes: tuple[str, ...]
    package: str
    """The fsspec implementation to import (it registers the schemes), pinned in envs/requirements-dev.lock."""
    extra: str
    """The pyproject extra that installs ``package``."""
    shape: str
    """What a URL looks like, for HINTs."""
    holder: str
    """What the store calls the top level of a URL: container, bucket."""
    credentials_hint: str
    endpoint_hint: str
    errors: Callable[[], tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]]
    """(cannot reach, refused): the client's exceptions beyond OSError, imported only when needed."""


def _azure_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    from azure.core.exceptions import AzureError, ServiceRequestError

    return (ServiceRequestError,), (AzureError,)


def _s3_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    import botocore.exceptions as boto

    # boto.ConnectionError: the endpoint refused or timed out the connection; s3fs turns the service's
    # own refusals (403, 404) into OSErrors, and BotoCoreError is the rest: no credentials, no such profile.
    return (boto.ConnectionError,), (boto.BotoCoreError, boto.ClientError)


AZURE = Store(
    name="Azure Blob Storage",
    schemes=("az", "abfs", "abfss"),
    package="adlfs",
    extra="azure-blob",
    shape="az://CONTAINER/PATH",
    holder="container",
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
    extra="s3",
    shape="s3://BUCKET/PATH",
    holder="bucket",
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
STORES = (AZURE, S3)


def store_of(scheme: str) -> Store | None:
    return next((store for store in STORES if scheme.lower() in store.schemes), None)


def supported() -> str:
    """The schemes snakeddp reads, for HINTs: "az://, abfs://, abfss:// or s3://"."""
    names = [f"{scheme}://" for store in STORES for scheme in store.schemes]
    return ", ".join(names[:-1]) + " or " + names[-1]
