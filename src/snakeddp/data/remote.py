"""Tables in object storage: ``data.table.path`` as an ``az://``/``abfs://`` (Azure Blob Storage, ADLS Gen2),
``s3://`` (Amazon S3, or an S3-compatible store) or ``gs://`` (Google Cloud Storage) URL.

    data:
      source: table
      table: {path: "s3://BUCKET/tables/train.parquet", features: [x1, x2], label: y}

Read through fsspec's adlfs, s3fs or gcsfs (pinned in envs/requirements-dev.lock; without one, the HINT's
``tools/add.sh adlfs --stage data`` puts it in the core lock, so where snakemake and the data stage run).
Credentials come from the environment as each store's own tools read them, never from the config
(snakeddp.data.stores): for Azure ``AZURE_STORAGE_CONNECTION_STRING``, or ``AZURE_STORAGE_ACCOUNT_NAME`` with
``AZURE_STORAGE_ACCOUNT_KEY`` or ``AZURE_STORAGE_SAS_TOKEN``, or ``DefaultAzureCredential``; for S3 the AWS
chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, an instance role), and
``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` for another store; for Google Cloud Storage Application Default
Credentials (``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth application-default login``, a VM's service
account), or ``STORAGE_EMULATOR_HOST`` for an emulator, reached anonymously.

A table's identity is its objects' listing, taken when the workflow plans: each object's name,
size and version (which the service changes when an object is written: Azure's ETag on every write, S3's
when the bytes differ, Google's generation on every write). A changed object is a new dataset and is
ingested again; an unchanged one is not; no byte is read to know. Listing is also where a missing
container, bucket or object, or refused credentials, stop the workflow in one line, before any job runs.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import IO, Any

from snakeddp.data.stores import Store, store_of, supported
from snakeddp.errors import TableError, add_hint
from snakeddp.util.hashing import sha256_json
from snakeddp.util.redact import redact_text

# The Azure SDK retries an endpoint it cannot reach for over a minute (81 s here), botocore for 7 s,
# before they fail; the workflow's plan waits at most this long for a table's listing.
LIST_TIMEOUT_S = 30.0


def _named(url: str) -> str:
    """The key and its URL as an error quotes them: user:password@ and a SAS signature masked."""
    return f"data.table.path={redact_text(url)!r}"


def is_url(path: Any) -> bool:
    return isinstance(path, str) and "://" in path


def _store(url: str) -> Store:
    scheme = url.partition("://")[0].lower()
    store = store_of(scheme)
    if store is None:
        raise TableError(
            f"{_named(url)}: {scheme}:// is not a storage snakeddp reads. HINT: use {supported()} "
            "(Azure Blob Storage, ADLS Gen2, Amazon S3, Google Cloud Storage), or copy the table to a local path."
        )
    return store


def _filesystem(url: str) -> tuple[Any, str]:
    store = _store(url)
    module, _, name = store.filesystem.partition(":")
    try:
        importlib.import_module(store.package)  # registers the store's schemes with fsspec
        imported = importlib.import_module(module or store.package)
    except ImportError:
        raise TableError(
            f"{_named(url)} needs the {store.package} package, which is not installed here. "
            f"{add_hint(store.package, 'data')}, then rerun."
        ) from None
    from fsspec.core import url_to_fs

    # A new client each time: one cached by fsspec would keep old credentials and an old listing. Made under
    # _guarded: some clients look for their credentials here.
    if name:
        cls = getattr(imported, name)
        fs = _guarded(url, lambda: cls(skip_instance_cache=True, **store.options()))
        return fs, fs._strip_protocol(url)
    return _guarded(url, lambda: url_to_fs(url, skip_instance_cache=True, **store.options()))


def _refused(url: str, store: Store, error: BaseException) -> TableError:
    """One line for what listing or reading an object raised; no credential in it."""
    if isinstance(error, FileNotFoundError):
        return TableError(
            f"{_named(url)}: no such {store.holder}, object or folder. HINT: check the URL "
            f"({store.shape}) and that the account in your credentials holds it."
        )
    first = redact_text(" ".join(str(error).split()))[:300]
    return TableError(f"{_named(url)}: the storage refused ({type(error).__name__}: {first}). {store.credentials_hint}")


def _unreachable(url: str, store: Store, error: BaseException) -> TableError:
    why = redact_text(" ".join(str(error).split()))[:300] or f"no answer within {LIST_TIMEOUT_S:.0f} s"
    return TableError(f"{_named(url)}: cannot reach the storage ({type(error).__name__}: {why}). {store.endpoint_hint}")


def _guarded(url: str, call: Callable[[], Any]) -> Any:
    from fsspec.exceptions import FSTimeoutError

    store = _store(url)
    unreachable, refused = store.errors()
    client_log = logging.getLogger(store.client_logger) if store.client_logger else None
    level = client_log.level if client_log else logging.NOTSET
    if client_log:
        client_log.setLevel(logging.CRITICAL)
    try:
        return call()
    except (FSTimeoutError, *unreachable) as error:  # before OSError: a timeout is one
        raise _unreachable(url, store, error) from None
    except (OSError, *refused) as error:
        raise _refused(url, store, error) from None
    finally:
        if client_log:
            client_log.setLevel(level)


def list_objects(url: str) -> tuple[list[dict[str, Any]], bool]:
    """The table's objects in name order, each with its URL, name relative to the table, size and ETag, and
    whether the URL names one object (else a folder, whose hidden names and names starting with "_" are
    skipped)."""
    fs, path = _filesystem(url)
    store, scheme = _store(url), url.partition("://")[0]
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
        etag = detail[store.version]
        objects.append({"url": f"{scheme}://{name}", "name": relative, "size": detail["size"], "etag": etag})
    return objects, info["type"] == "file"


def fingerprint(objects: list[dict[str, Any]]) -> str:
    """sha256 over the objects' names, sizes and ETags."""
    return sha256_json([[o["name"], o["size"], o["etag"]] for o in objects])


def open_object(url: str) -> IO[bytes]:
    """A seekable binary stream of one object, read in blocks as it is consumed (never the whole object)."""
    fs, path = _filesystem(url)
    return _guarded(url, lambda: fs.open(path, "rb"))
