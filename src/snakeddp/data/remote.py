"""Tables in Azure Blob Storage or ADLS Gen2: ``data.table.path`` as an ``az://`` or ``abfs://`` URL.

    data:
      source: table
      table: {path: "az://CONTAINER/tables/train.parquet", features: [x1, x2], label: y}

Read through fsspec's adlfs (``envs/requirements-dev.in``; install it where the data stage runs).
Credentials come from the environment as Azure's own tools read them, never from the config:
``AZURE_STORAGE_CONNECTION_STRING``, or ``AZURE_STORAGE_ACCOUNT_NAME`` with
``AZURE_STORAGE_ACCOUNT_KEY`` or ``AZURE_STORAGE_SAS_TOKEN``, or for the account alone
``DefaultAzureCredential`` (managed identity, ``az login``, service principal variables).

A table's identity is its objects' listing, taken when the workflow plans: each object's name,
size and ETag (which the service changes on every write). A changed object is a new dataset and is
ingested again; an unchanged one is not; no byte is read to know. Listing is also where a missing
container or object, or refused credentials, stop the workflow in one line, before any job runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from snakeddp.errors import TableError
from snakeddp.util.hashing import sha256_json
from snakeddp.util.redact import redact_text

SCHEMES = ("az", "abfs", "abfss")
# The Azure SDK retries an endpoint it cannot reach for over a minute (81 s here) before it fails;
# the workflow's plan waits at most this long for a table's listing.
LIST_TIMEOUT_S = 30.0
CREDENTIALS_HINT = (
    "HINT: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or "
    "AZURE_STORAGE_SAS_TOKEN (or sign in for DefaultAzureCredential), in the environment snakemake runs in."
)


def is_url(path: Any) -> bool:
    return isinstance(path, str) and "://" in path


def _filesystem(url: str) -> tuple[Any, str]:
    scheme = url.partition("://")[0].lower()
    if scheme not in SCHEMES:
        raise TableError(
            f"data.table.path={url!r}: {scheme}:// is not a storage snakeddp reads. HINT: use az:// or abfs:// "
            "(Azure Blob Storage, ADLS Gen2), or copy the table to a local path."
        )
    try:
        import adlfs  # noqa: F401  (registers az:// and abfs:// with fsspec)
    except ImportError:
        raise TableError(
            f"data.table.path={url!r} needs the adlfs package, which is not installed. HINT: pip install adlfs "
            "(the version pinned in envs/requirements-dev.lock) where snakemake and the data stage run."
        ) from None
    from fsspec.core import url_to_fs

    # A new client each time: one cached by fsspec would keep old credentials and an old listing.
    return url_to_fs(url, skip_instance_cache=True)


def _refused(url: str, error: Exception) -> TableError:
    """One line for what listing or reading an object raised; no credential in it."""
    if isinstance(error, FileNotFoundError):
        return TableError(
            f"data.table.path={url!r}: no such container, object or folder. HINT: check the URL "
            "(az://CONTAINER/PATH) and that the account in your credentials holds it."
        )
    first = redact_text(" ".join(str(error).split()))[:300]
    return TableError(
        f"data.table.path={url!r}: the storage refused ({type(error).__name__}: {first}). {CREDENTIALS_HINT}"
    )


def _unreachable(url: str, error: Exception) -> TableError:
    why = redact_text(" ".join(str(error).split()))[:300] or f"no answer within {LIST_TIMEOUT_S:.0f} s"
    return TableError(
        f"data.table.path={url!r}: cannot reach the storage ({type(error).__name__}: {why}). HINT: check the "
        "network and the account's endpoint (BlobEndpoint in AZURE_STORAGE_CONNECTION_STRING, or "
        "AZURE_STORAGE_ACCOUNT_NAME), then rerun."
    )


def _guarded(url: str, call: Callable[[], Any]) -> Any:
    from azure.core.exceptions import AzureError, ServiceRequestError
    from fsspec.exceptions import FSTimeoutError

    try:
        return call()
    except (FSTimeoutError, ServiceRequestError) as error:  # before OSError: a timeout is one
        raise _unreachable(url, error) from None
    except (OSError, AzureError) as error:
        raise _refused(url, error) from None


def list_objects(url: str) -> tuple[list[dict[str, Any]], bool]:
    """The table's objects in name order, each with its URL, name relative to the table, size and ETag, and
    whether the URL names one object (else a folder, whose hidden names and names starting with "_" are
    skipped)."""
    fs, path = _filesystem(url)
    scheme = url.partition("://")[0]
    info = _guarded(url, lambda: fs.info(path, timeout=LIST_TIMEOUT_S))
    if info["type"] == "file":
        found, base = {info["name"]: info}, info["name"].rpartition("/")[0]
    else:
        found = _guarded(url, lambda: fs.find(path, detail=True, timeout=LIST_TIMEOUT_S))
        base = path.rstrip("/")
    objects = []
    for name, detail in sorted(found.items()):
        relative = name[len(base) :].lstrip("/")
        if detail["type"] != "file" or relative.rpartition("/")[2].startswith((".", "_")):
            continue
        objects.append({"url": f"{scheme}://{name}", "name": relative, "size": detail["size"], "etag": detail["etag"]})
    return objects, info["type"] == "file"


def fingerprint(objects: list[dict[str, Any]]) -> str:
    """sha256 over the objects' names, sizes and ETags."""
    return sha256_json([[o["name"], o["size"], o["etag"]] for o in objects])


def open_object(url: str) -> IO[bytes]:
    """A seekable binary stream of one object, read in blocks as it is consumed (never the whole object)."""
    fs, path = _filesystem(url)
    return _guarded(url, lambda: fs.open(path, "rb"))
