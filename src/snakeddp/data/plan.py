"""What the workflow asks of a table dataset while it plans: its files (the ingest job's inputs) and
their checksum, which becomes part of every run config that trains on it.

snakeddp.data.source and identity are imported only when a run reads a table: every dry run parses this."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.config import parts
from snakeddp.config.sources import TABLE
from snakeddp.errors import ConfigError


def input_files(data: Mapping[str, Any]) -> list[str]:
    """The files a dataset is made from (a table's CSV/Parquet files; none for the other sources)."""
    if data.get("source") != TABLE:
        return []
    from snakeddp.data.remote import is_url
    from snakeddp.data.source import table_files

    if is_url(data["table"]["path"]):
        return []  # objects in storage: their ETags are in the dataset id (resolve_tables) instead
    if data["table"].get("version") is not None:
        return []  # a Delta table's version: its table id, version and files are in the dataset id

    return [str(p) for p in table_files(data["table"]["path"], data["table"]["format"])[1]]


def resolve_tables(runs: Mapping[str, Mapping[str, Any]], cache: str | Path | None = None) -> None:
    """Fill ``data.table.sha256`` of every table run with its files' checksum (in place); for a Delta
    table, with its table id, version and data files, and ``data.table.version`` with the version; an empty
    ``data.table.features`` with the columns it takes.

    The checksum becomes part of the run config and of the dataset id: a changed table is a new
    dataset, and run.yaml says exactly which table a run trained on. A pinned checksum that no
    longer matches stops the workflow. ``cache``: the files' hashes kept between starts (by default the
    workflow's, snakeddp.data.identity.CACHE, which its ingestion reads too).
    """
    from snakeddp.data.identity import CACHE, cached_fingerprint
    from snakeddp.data.remote import is_url, list_objects
    from snakeddp.data.source import check_columns, delta_snapshot, features_of, open_source
    from snakeddp.errors import TableError

    for run_id, run in runs.items():
        data = run["config"]["data"]
        if data.get("source") != TABLE:
            continue
        table = data["table"]
        try:
            # A URL is listed once, for both questions (a Delta table? its objects' checksum), on every
            # start of the workflow; a table declared Delta needs no listing (delta-rs reads its log).
            listable = is_url(table["path"]) and table["format"] != "delta"
            listed = list_objects(str(table["path"])) if listable else None
            snapshot = delta_snapshot(parts.Table.of(table), listed)
            if snapshot is not None:
                # The table and version trained on are part of the run: a new commit is a new dataset.
                table["table_id"], table["version"] = snapshot.table_id, snapshot.version
            digest = (
                snapshot.identity()
                if snapshot
                else cached_fingerprint(table["path"], table["format"], cache or CACHE, listed)
            )
            typed = parts.Table.of(table)
            if not table["features"]:
                # Every column but the label, resolved once (from the first file's or the version's columns) and
                # recorded sorted: the run config names its features whatever order a file has them in.
                table["features"] = features_of(typed, open_source(typed, snapshot))
                # The keys that chose them are spent: left in, run.yaml would list features beside them, which
                # the config's check refuses as the user's own mistake when every rank reads it. Only a key set
                # is reset, so the run config of a table narrowed by neither is what it was.
                for key, default in (("feature_pattern", None), ("exclude", [])):
                    if table.get(key):
                        table[key] = default
            elif not listable:  # a local table's (or a Delta version's) columns, read from its header or schema
                check_columns(typed, open_source(typed, snapshot))
        except TableError as error:
            raise ConfigError(f"run {run_id}: {error}") from None
        if table["sha256"] not in (None, digest):
            raise ConfigError(
                f"run {run_id}: data.table.sha256 pins {table['sha256']}, but {table['path']} now has {digest}. "
                "HINT: the table changed; restore it, or update/clear data.table.sha256 to train on the new one."
            )
        table["sha256"] = digest
