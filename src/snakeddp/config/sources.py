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
from typing import Any

from snakeddp.errors import DataSourceError

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
    TABLE: ("name", "source", "seed", "num_train_files", "num_classes", "table", "image"),
    MODULE: ("name", "source", "module", "module_kwargs"),
}

# The generator's own keys: they shape no other source's samples.
SYNTHETIC_ONLY = tuple(key for key in SOURCE_KEYS[SYNTHETIC] if key not in {*SOURCE_KEYS[TABLE], *SOURCE_KEYS[MODULE]})

# Keys of a table dataset left out of its identity at their default (a Delta table's, unset for CSV and Parquet
# tables; those of columns that are not plain numbers, and data.image): so a table's dataset id is the same from a
# validated config (defaults filled in) and a run config (which leaves them out), and as before they existed.
TABLE_DEFAULTS = {
    "version": None,
    "table_id": None,
    "feature_pattern": None,
    "exclude": [],
    "categories": [],
    "unseen": "error",
}
# data.image at its default (the schema's): left out of a dataset's identity, as a run config leaves it out.
IMAGE_DEFAULTS = {"size": None, "channels": 3, "max_pixels": 40_000_000, "max_bytes": 64 << 20}


def identity(data: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters that shape a dataset's bytes, for its id and for the data rules."""
    keys = SOURCE_KEYS[data.get("source", SYNTHETIC)]
    found = {key: copy.deepcopy(data[key]) for key in keys if key in data}
    if isinstance(found.get("table"), dict):
        # Once features are listed (or resolved when the workflow plans), the keys that chose them say nothing more.
        chosen = ("feature_pattern", "exclude") if found["table"].get("features") else ()
        found["table"] = {
            k: v
            for k, v in found["table"].items()
            if not (k in TABLE_DEFAULTS and v == TABLE_DEFAULTS[k]) and k not in chosen
        }
    if found.get("image") in ({}, IMAGE_DEFAULTS):
        del found["image"]
    return found


def task(params: Mapping[str, Any]) -> dict[str, Any]:
    """What a model needs to know about a dataset's samples and labels (a table's columns as its ingestion
    encoded them are in the task it recorded: snakeddp.data.columns)."""
    classes = params["num_classes"]
    features = len(params["table"]["features"]) if params.get("source") == TABLE else params["num_features"]
    return {"num_features": features, "num_classes": classes, "kind": "binary" if classes == 1 else "multiclass"}


def check(data: Mapping[str, Any], source: str = "config") -> None:
    """Cross-key rules of the data section that JSON Schema cannot say well."""
    kind = data.get("source", SYNTHETIC)
    if kind == TABLE:
        table = data.get("table", {})
        missing = [key for key in ("path", "label") if not table.get(key)]
        if missing:
            raise DataSourceError(
                f"{source}: data.source=table needs data.table.{', data.table.'.join(missing)}. "
                "HINT: name the file or folder and the label column (and the feature columns, or none for all "
                "the others), e.g. table: {path: data/train.csv, features: [x1, x2], label: y}."
            )
        listed = [key for key in ("feature_pattern", "exclude") if table.get("features") and table.get(key)]
        if listed:
            raise DataSourceError(
                f"{source}: data.table.{listed[0]} narrows the columns taken when data.table.features is empty, "
                "and features lists them. HINT: remove one of the two."
            )
        if table["label"] in table.get("categories", []):
            raise DataSourceError(
                f"{source}: data.table.categories lists the label {table['label']!r}: a category is a feature's "
                "one-hot, and the label holds class indices. HINT: remove it from data.table.categories, and encode "
                "the label as 0..data.num_classes-1 where the table is written."
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
