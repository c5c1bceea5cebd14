"""Where a dataset's samples come from (``data.source``) and which config keys make up its identity.

A dataset's directory is ``<name>-<hash of its identity parameters>``. Each source has its own
identity: a synthetic dataset is defined by its generator parameters (not by how many partitions
exist, so adding partitions reuses the directory); a table by its columns, split and the
checksum of its files (a changed table is a new dataset), and by the number of partitions, since
rows are dealt across them; a module dataset by the DataModule and its arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.errors import ConfigError, DataSourceError

SYNTHETIC = "synthetic"
TABLE = "table"
MODULE = "module"
# Keys that only configure how training loads data: never part of what is written.
LOADER_KEYS = ("module", "module_kwargs")
SOURCE_KEYS = {
    SYNTHETIC: (
        "name",
        "source",
        "seed",
        "num_records_per_train_file",
        "num_val_records",
        "num_features",
        "num_classes",
        "labels",
        "label_noise",
    ),
    TABLE: ("name", "source", "seed", "num_train_files", "num_classes", "table"),
    MODULE: ("name", "source", "module", "module_kwargs"),
}


def identity(data: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters that shape a dataset's bytes, for its id and for the data rules."""
    keys = SOURCE_KEYS[data.get("source", SYNTHETIC)]
    return {key: copy.deepcopy(data[key]) for key in keys if key in data}


def task(params: Mapping[str, Any]) -> dict[str, Any]:
    """What a model needs to know about a dataset's samples and labels."""
    classes = params["num_classes"]
    features = len(params["table"]["features"]) if params.get("source") == TABLE else params["num_features"]
    return {"num_features": features, "num_classes": classes, "kind": "binary" if classes == 1 else "multiclass"}


def check(data: Mapping[str, Any], source: str = "config") -> None:
    """Cross-key rules of the data section that JSON Schema cannot say well."""
    kind = data.get("source", SYNTHETIC)
    if kind == TABLE:
        table = data.get("table", {})
        missing = [key for key in ("path", "label") if not table.get(key)]
        if not table.get("features"):
            missing.append("features")
        if missing:
            raise DataSourceError(
                f"{source}: data.source=table needs data.table.{', data.table.'.join(missing)}. "
                "HINT: name the file or folder, the feature columns and the label column, e.g. "
                "table: {path: data/train.csv, features: [x1, x2], label: y}."
            )
        duplicated = sorted({c for c in table["features"] if table["features"].count(c) > 1})
        if duplicated or table["label"] in table["features"]:
            raise DataSourceError(
                f"{source}: data.table.features must be distinct and must not contain the label "
                f"(repeated: {duplicated or [table['label']]})."
            )
    if kind == MODULE and not data.get("module"):
        raise DataSourceError(
            f"{source}: data.source=module needs data.module, the DataModule that reads the data. "
            "HINT: set data.module: 'package.module:ClassName' (and data.module_kwargs)."
        )


def input_files(data: Mapping[str, Any]) -> list[str]:
    """The files a dataset is made from (a table's CSV/Parquet files; none for the other sources)."""
    if data.get("source") != TABLE:
        return []
    from snakeddp.data.table import table_files

    return [str(p) for p in table_files(data["table"]["path"], data["table"]["format"])[1]]


def resolve_tables(runs: Mapping[str, Mapping[str, Any]], cache: str | Path) -> None:
    """Fill ``data.table.sha256`` of every table run with its files' checksum (in place).

    The checksum becomes part of the run config and of the dataset id: a changed table is a new
    dataset, and run.yaml says exactly which table a run trained on. A pinned checksum that no
    longer matches stops the workflow.
    """
    from snakeddp.data.table import TableError, cached_fingerprint

    for run_id, run in runs.items():
        data = run["config"]["data"]
        if data.get("source") != TABLE:
            continue
        table = data["table"]
        try:
            digest = cached_fingerprint(table["path"], table["format"], cache)
        except TableError as error:
            raise ConfigError(f"run {run_id}: {error}") from None
        if table["sha256"] not in (None, digest):
            raise ConfigError(
                f"run {run_id}: data.table.sha256 pins {table['sha256']}, but {table['path']} now has {digest}. "
                "HINT: the table changed; restore it, or update/clear data.table.sha256 to train on the new one."
            )
        table["sha256"] = digest
