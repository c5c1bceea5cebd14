"""The DataModule a run trains on: snakeddp's PartitionDataModule, or the user's ``data.module``.

Contract of a custom DataModule (``data.module: "package.module:ClassName"``):

- It is a ``lightning.pytorch.LightningDataModule``, built once per rank as
  ``ClassName(**data.module_kwargs)`` plus whichever of these its constructor names:
  ``manifest_path`` (the dataset manifest for data.source synthetic or table; None for
  data.source module), ``batch_size`` (trainer.batch_size, per process) and ``seed``.
- Built-in models (model.name) need a ``task`` attribute after construction,
  ``{"num_features": int, "num_classes": int}``; a model.target gets those values from it too.
- Sharding: a subclass of PartitionDataModule keeps snakeddp's exact sharding; any other
  DataModule gets Lightning's DistributedSampler (each rank a disjoint share of every epoch).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from snakeddp.config import parts
from snakeddp.config.targets import accepted_parameters, construct, load_class
from snakeddp.data.module import PartitionDataModule
from snakeddp.errors import ConfigError
from snakeddp.util.fsutil import atomic_write_json, read_json

MODULE_RECORD_FORMAT = "snakeddp-module-data/1"


def write_module_record(path: str | Path, dataset: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The stand-in manifest of a data.source=module dataset: which DataModule, with which arguments."""
    record = {"format": MODULE_RECORD_FORMAT, "dataset": dataset, "params": dict(params)}
    atomic_write_json(path, record)
    return record


def build_datamodule(
    data: parts.Data, trainer: parts.Trainer, seed: int, manifest_path: str | Path
) -> pl.LightningDataModule:
    """The DataModule of a run: ``data.module`` if set, else PartitionDataModule on the manifest."""
    if not data.module:
        return PartitionDataModule(
            manifest_path,
            trainer.batch_size,
            seed,
            trace=trainer.trace_samples,
            augment=parts.thaw(data.augment),
        )
    if trainer.trace_samples:
        raise ConfigError(
            "trainer.trace_samples records the sample ids of snakeddp's partition loader, but data.module "
            f"is {data.module!r}. HINT: set trace_samples: false."
        )
    cls = load_class(data.module, "data.module", pl.LightningDataModule)
    offered = {
        "manifest_path": None if data.source == "module" else Path(manifest_path),
        "batch_size": trainer.batch_size,
        "seed": seed,
    }
    wanted = accepted_parameters(cls)
    arguments = {**{k: v for k, v in offered.items() if k in wanted}, **parts.thaw(data.module_kwargs)}
    return construct(cls, arguments, data.module, "data.module")


def task_of(datamodule: pl.LightningDataModule) -> dict[str, Any] | None:
    return getattr(datamodule, "task", None)


def shards_itself(datamodule: pl.LightningDataModule) -> bool:
    """Whether the DataModule splits samples across ranks itself (else Lightning's sampler must)."""
    return isinstance(datamodule, PartitionDataModule)


def describe(datamodule: pl.LightningDataModule, manifest_path: Path, manifest_sha256: str) -> dict[str, Any]:
    """The data section of provenance, for snakeddp's loader or a custom one."""
    manifest = getattr(datamodule, "manifest", None)
    if not isinstance(manifest, Mapping):
        manifest = read_json(manifest_path)
    described = {
        "manifest": str(manifest_path),
        "manifest_sha256": manifest_sha256,
        "dataset": manifest.get("dataset"),
        "partitions": len(manifest["train"]) if "train" in manifest else None,
        "records": manifest.get("records"),
    }
    # A table's columns as ingestion encoded them (vocabularies included), and a folder of images' classes.
    task = manifest.get("task") or {}
    return described | {key: task[key] for key in ("inputs", "classes") if key in task}
