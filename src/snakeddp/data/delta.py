"""Delta Lake tables as a table dataset's source: ``data.table.path`` naming a Delta table's folder
(local, or ``az://``/``abfs://``, ``s3://``, ``gs://``), read with delta-rs (the ``deltalake``
package: no JVM, no Spark).

    data:
      source: table
      table: {path: "az://lake/tables/churn", features: [x1, x2], label: y, version: 12}

A Delta table's identity is its table id (``metadata().id``, the same in every version) and a
version. Planning resolves ``data.table.version`` (null: the latest commit) into the run config and
the dataset id, so a new commit is a new dataset and re-plans ingestion, and a pinned version
trains on that snapshot whatever is committed later (time travel). delta-rs reads only the log: a
version's rows are those of its data files (the log's add actions), read in commit order by the
same Parquet reader as a Parquet table, one row group at a time, through the same object-storage
clients, so the partitions are byte-identical wherever the table is read from.

The log also gives what a data file does not hold: the values of the table's partition columns
(``partitionValues``, typed by the table's schema), and the table's columns, so a column a later
commit added (schema evolution) is null in the rows of older files, not missing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from snakeddp.data import remote
from snakeddp.errors import TableError, add_hint
from snakeddp.util.hashing import sha256_json
from snakeddp.util.redact import redact_text

LOG = "_delta_log"
# Reader features that change which bytes of a data file are rows (deleted rows in a side file,
# physical column names): read file by file, they would give wrong rows, so such tables are refused.
UNSUPPORTED_READER_FEATURES = ("deletionVectors", "columnMapping")


@dataclass(frozen=True)
class Snapshot:
    """One version of a Delta table: what identifies it and the data files that hold its rows."""

    table_id: str
    version: int
    files: tuple[tuple[str, int], ...]
    """(path relative to the table, as the log writes it, and size in bytes) of each data file, in commit order."""
    # The table id, version and files determine these, so the identity leaves them out.
    partition_values: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)
    """Each data file's partition values (column -> value typed by the table's schema, None for null), in the
    order of ``files``; empty mappings for a table without partition columns."""
    columns: tuple[str, ...] = field(default=(), compare=False)
    """The table's columns at this version: partition columns, and those a later commit added, included."""

    def identity(self) -> str:
        """sha256 of the table id, the version and its files: the dataset id's part for the table."""
        return sha256_json({"delta_table_id": self.table_id, "version": self.version, "files": self.files})


def is_delta(path: str | Path, objects: list[dict[str, Any]] | None = None) -> bool:
    """Whether ``path`` is a Delta table: a folder with a _delta_log (``objects``: a URL's listing)."""
    if remote.is_url(path):
        return any(o["name"].startswith(f"{LOG}/") for o in objects or [])
    return (Path(path) / LOG).is_dir()


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError:
        raise TableError(
            f"a Delta table needs the deltalake package, which is not installed here. {add_hint('deltalake', 'data')}, "
            "then rerun."
        ) from None
    return deltalake


def storage_options(url: str, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """delta-rs's options for the store of ``url``, from the variables the store's own tools read
    (snakeddp.data.stores): delta-rs reads most of them itself, but not an Azure connection string,
    and it refuses a plain-HTTP endpoint (an emulator's) unless told."""
    scheme = url.partition("://")[0].lower()
    options: dict[str, str] = {}
    if scheme in ("az", "abfs", "abfss"):
        parts = dict(
            item.split("=", 1) for item in env.get("AZURE_STORAGE_CONNECTION_STRING", "").split(";") if "=" in item
        )
        if parts.get("AccountName"):
            options["account_name"] = parts["AccountName"]
        if parts.get("AccountKey"):
            options["account_key"] = parts["AccountKey"]
        if parts.get("SharedAccessSignature"):
            options["sas_token"] = parts["SharedAccessSignature"]
        endpoint = parts.get("BlobEndpoint")
        if endpoint:
            options["endpoint"] = endpoint.rstrip("/")
    elif scheme == "s3":
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        if endpoint:
            options["endpoint"] = endpoint
        options.setdefault("region", env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1")
    endpoint = options.get("endpoint", "")
    if endpoint.startswith("http://"):
        options["allow_http"] = "true"
    return options


def _table_uri(path: str | Path) -> str:
    """delta-rs names Azure containers abfs://; snakeddp's az:// is the same place."""
    text = str(path)
    return "abfs://" + text[len("az://") :] if text.startswith("az://") else text


def _load(path: str | Path, version: int | None) -> Any:
    """delta-rs's DeltaTable at ``version`` (None: the latest); delta-rs's own error if it cannot."""
    deltalake = _deltalake()
    uri = _table_uri(path)
    options = storage_options(uri) if remote.is_url(path) else None
    return deltalake.DeltaTable(uri, version=version, storage_options=options)


def _oldest(path: str | Path, latest: int) -> int:
    """The oldest version the log can still load. Loadable versions are one run up to the latest (a version
    loads from the checkpoint at or before it and the commits after), so bisection finds its start in
    log2(versions) loads of the log; only the refusal of a missing version pays for them."""
    gone, kept = -1, latest
    while kept - gone > 1:
        middle = (gone + kept) // 2
        try:
            _load(path, middle)
        except Exception:  # delta-rs's kernel errors for a version it cannot load
            gone = middle
        else:
            kept = middle
    return kept


def _missing_version(path: str | Path, version: int) -> TableError | None:
    """The refusal of a ``version`` the table does not have, naming the versions it has; None when the table
    cannot be opened at its latest version either (then the version is not what is wrong)."""
    try:
        latest = int(_load(path, None).version())
    except Exception:  # any reason it cannot be opened is _open's to say
        return None
    oldest = _oldest(path, latest)
    removed = " (VACUUM or log retention removed it)" if version < oldest else ""
    has = f"version {latest} only" if oldest == latest else f"versions {oldest} to {latest}"
    return TableError(
        f"data.table.path={str(path)!r}: the Delta table has no version {version}{removed}; it has {has} "
        f"(latest: {latest}). HINT: set data.table.version to one it has ({oldest} to {latest}), or remove "
        "data.table.version to train on the latest."
    )


def _open(path: str | Path, version: int | None) -> Any:
    """delta-rs's DeltaTable at ``version`` (None: the latest), or a TableError in one line with a HINT."""
    try:
        return _load(path, version)
    except TableError:
        raise
    except Exception as error:  # delta-rs raises its own TableNotFoundError, DeltaError, OSError...
        missing = _missing_version(path, version) if version is not None else None
        if missing is not None:
            raise missing from None
        why = redact_text(" ".join(str(error).split()))[:300]
        at = f" at version {version}" if version is not None else ""
        raise TableError(
            f"data.table.path={str(path)!r}: cannot read the Delta table{at} ({type(error).__name__}: {why}). "
            "HINT: check the path (a folder holding _delta_log/), data.table.version (a version the log still "
            "has: VACUUM and log retention remove old ones), and the storage's credentials."
        ) from None


def open_snapshot(path: str | Path, version: int | None) -> Snapshot:
    """The table's ``version`` (None: its latest), or a TableError in one line with a HINT."""
    table = _open(path, version)
    features = set(table.protocol().reader_features or ()) & set(UNSUPPORTED_READER_FEATURES)
    if features:
        raise TableError(
            f"data.table.path={str(path)!r}: the Delta table uses {', '.join(sorted(features))}, which snakeddp "
            "does not read. HINT: rewrite it without them (REORG TABLE ... APPLY (PURGE) for deletion vectors), "
            "or export the version you train on as Parquet."
        )
    actions = table.get_add_actions(flatten=True)
    paths = [str(p) for p in actions.column("path").to_pylist()]
    sizes = [int(s) for s in actions.column("size_bytes").to_pylist()]
    # Flattened, each partition column is one column of the actions, typed as the schema declares it.
    partition_columns = list(table.metadata().partition_columns)
    values = {name: actions.column(f"partition.{name}").to_pylist() for name in partition_columns}
    # Rows in the order they were committed: the log's modification times, then paths. Writers name
    # data files with random UUIDs, so path order alone would shuffle commits differently in every copy
    # of the same history; the log's own order is not part of the protocol.
    times = [int(t) for t in actions.column("modification_time").to_pylist()]  # ms since the epoch
    order = sorted(range(len(paths)), key=lambda i: (times[i], paths[i], sizes[i]))
    return Snapshot(
        str(table.metadata().id),
        int(table.version()),
        tuple((paths[i], sizes[i]) for i in order),
        partition_values=tuple({name: values[name][i] for name in partition_columns} for i in order),
        columns=tuple(f.name for f in table.schema().fields),
    )


def require_columns(path: str | Path, snapshot: Snapshot, wanted: Sequence[str]) -> None:
    """A TableError naming the table, unless its schema has every ``wanted`` column."""
    missing = [c for c in wanted if c not in snapshot.columns]
    if missing:
        raise TableError(
            f"data.table.path={str(path)!r} (Delta table, version {snapshot.version}): no column "
            f"{', '.join(map(repr, missing))} (the table has: {', '.join(snapshot.columns)}). HINT: fix "
            "data.table.features / data.table.label, or data.table.version if a later version added it."
        )


def _has_column(path: str | Path, version: int, column: str) -> bool | None:
    """Whether ``version``'s schema has ``column``; None when the log no longer has that version."""
    try:
        table = _load(path, version)
    except TableError:
        raise
    except Exception:  # delta-rs's kernel errors for a version it cannot load
        return None
    return column in [f.name for f in table.schema().fields]


def added_later(path: str | Path, snapshot: Snapshot, column: str, file: str | Path) -> TableError:
    """The refusal of a data file without ``column``, which the table's schema has: a commit after the
    file's added it (schema evolution), so the file's rows have no value for it."""
    # Bisection between a version without the column (or before the table) and one with it finds a
    # version that added it in log2(versions) loads of the log; only this error pays for them.
    before, after, gone = -1, snapshot.version, False
    while after - before > 1:
        middle = (before + after) // 2
        found = _has_column(path, middle, column)
        if found:
            after = middle
        else:
            before, gone = middle, found is None
    if before < 0:
        when = "which the table has had since version 0"
    elif gone:
        when = (
            f"which the table has by version {after} (the log no longer has version {before}: log retention "
            "removed it, so which commit added the column is not known)"
        )
    else:
        when = f"which version {after} added"
    fill = f"UPDATE ... SET {column} = ... WHERE {column} IS NULL"  # noqa: S608 - a HINT's example, never run
    return TableError(
        f"data.table.path={str(path)!r} (Delta table, version {snapshot.version}): data file {file} has no column "
        f"{column!r}, {when}; the file is older, so its rows have no value for it. HINT: set "
        f"data.table.nan_policy: drop to skip those rows, or fill them in the table (e.g. {fill}), then rerun."
    )


def data_files(path: str | Path, snapshot: Snapshot) -> list[str] | list[Path]:
    """Where the snapshot's data files are, as the Parquet reader opens them (URLs for a table in storage)."""
    # The log holds each path as a URI: unescaped once, it is the file's name (delta-rs puts the partition
    # value "a b" in the folder "site=a%20b", which the log writes "site=a%2520b").
    names = [unquote(name) for name, _ in snapshot.files]
    if remote.is_url(path):
        return [f"{str(path).rstrip('/')}/{name}" for name in names]
    return [Path(path) / name for name in names]
