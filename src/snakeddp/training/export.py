"""A run's best model as two plain files: weights in ``model.safetensors``, how to build it in ``model.json``.

    snakeddp export RUN [--to DIR]       # default DIR: results/export/<run>

    import snakeddp
    model = snakeddp.load(DIR)           # the LightningModule, in eval mode, on the CPU
    x = snakeddp.inputs(DIR).encode(rows)  # raw columns (a table's categories, arrays, images) as its input

``model.json`` names the model's class by import path with its constructor arguments (plain JSON),
the monitored metric with its best value, and where the weights came from (run id, attempt, the
sha256 of the run's provenance.json and of the checkpoint). ``load`` reads these two files and
nothing else: it imports the class, calls it with the arguments and fills its parameters and
buffers from safetensors, so nothing is unpickled. The checkpoint is read once, at export, with
torch's weights-only unpickler (``safe_load``).

The arguments are rebuilt as training built them (``models``): the built-in model from the run's
config, a ``model.target`` from ``model.kwargs``; both sized by the dataset's task (its manifest,
or for a DataModule without one the task values the checkpoint's hyperparameters hold). Loading
the checkpoint's weights into the model built from them, strictly, checks that they fit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import safetensors.torch

from snakeddp.config.targets import construct, load_class
from snakeddp.data.columns import Inputs
from snakeddp.errors import ExportError, TargetError
from snakeddp.run.layout import paths_of
from snakeddp.run.runs import Run, best_checkpoint
from snakeddp.training.models import MODELS, TASK_PARAMETERS, builtin_arguments, custom_arguments
from snakeddp.training.safe_load import read_checkpoint
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.hashing import sha256_file

# /2: run.checkpoint.epoch counts from 1, as the checkpoint's file name (epoch003-...) and the report's best epoch
# do; /1 held Lightning's index from 0 there, read as /2 by ``read_description`` (``_as_current``).
FORMAT = "snakeddp-export/2"
FORMAT_1 = "snakeddp-export/1"
WEIGHTS = "model.safetensors"
DESCRIPTION = "model.json"
# Exports live beside the other stages' results: results/export/<run label>/.
EXPORT_DIR = "export"


def default_destination(results: str | Path, run: Run) -> Path:
    """Where ``snakeddp export RUN`` writes without --to: ``results/export/<run label>``."""
    return Path(results) / EXPORT_DIR / run.label


def task(run: Run, checkpoint: Mapping[str, Any]) -> dict[str, Any] | None:
    """The dataset's num_features and num_classes as training saw them."""
    manifest = run.manifest_path
    if manifest.is_file():
        recorded = read_json(manifest).get("task")
        if recorded:
            return dict(recorded)
    hyperparameters = checkpoint.get("hyper_parameters") or {}
    found = {name: hyperparameters[name] for name in TASK_PARAMETERS if name in hyperparameters}
    return found or None


def model_class_and_arguments(run: Run, checkpoint: Mapping[str, Any]) -> tuple[type, dict[str, Any]]:
    model_cfg = run.provenance["config"]["model"]
    if model_cfg.get("target"):
        # As in training, whose ranks start with `python -m` in the directory the workflow ran in.
        if str(run.workdir) not in sys.path:
            sys.path.insert(0, str(run.workdir))
        cls = load_class(model_cfg["target"], "model.target", pl.LightningModule)
        return cls, custom_arguments(cls, model_cfg.get("kwargs") or {}, task(run, checkpoint))
    return MODELS[model_cfg["name"]], builtin_arguments(model_cfg, task(run, checkpoint))


def import_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def export(run: Run, destination: str | Path, best: tuple[Path, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Write ``run``'s best model to ``destination`` (model.safetensors, then model.json); return model.json.
    ``best``: what ``best_checkpoint(run)`` returned, where the caller checked it already."""
    path, record = best or best_checkpoint(run)
    checkpoint = read_checkpoint(path)
    cls, arguments = model_class_and_arguments(run, checkpoint)
    target = import_path(cls)
    model = construct(cls, arguments, target, "model.target")
    try:
        model.load_state_dict(checkpoint["state_dict"], strict=True)
    except (KeyError, RuntimeError) as error:
        cause = " ".join(str(error).split())[:300]
        raise ExportError(
            f"run {run.label}: the weights in {path} do not fit {target}({_shown(arguments)}) as it is now ({cause}). "
            "HINT: export with the model code the run trained with (its sha256 is in provenance.json, user_code)."
        ) from error
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    partial = destination / f".{WEIGHTS}.partial"
    safetensors.torch.save_model(model, str(partial), metadata={"format": FORMAT, "run_id": run.run_id})
    os.replace(partial, destination / WEIGHTS)
    best = dict(run.monitor)
    description = {
        "format": FORMAT,
        "model": {"target": target, "kwargs": arguments},
        "monitor": {**best, "best": record.get("score")},
        "run": {
            "run_id": run.run_id,
            "attempt": run.attempt_id,
            "provenance_sha256": sha256_file(paths_of(run.run_dir).provenance),
            "checkpoint": {"path": record["path"], "sha256": record["sha256"], "epoch": _counted(checkpoint)},
        },
        "weights": {"file": WEIGHTS, "sha256": sha256_file(destination / WEIGHTS)},
    }
    # How raw rows become the model's input (the columns' layout, vocabularies, image size): snakeddp.inputs.
    recorded = task(run, checkpoint) or {}
    if recorded.get("inputs"):
        kept = ("inputs", "input_shape", "classes")
        # Images are standardised as training's DataModule did, unless the run turned that off.
        if (run.provenance["config"]["data"].get("augment") or {}).get("normalize", True):
            kept += ("image",)
        description["inputs"] = {key: recorded[key] for key in kept if key in recorded}
    # Last: a directory with model.json holds a complete export.
    atomic_write_json(destination / DESCRIPTION, description)
    return description


def _counted(checkpoint: Mapping[str, Any]) -> int | None:
    """The checkpoint's epoch as its file name counts it, from 1 (Lightning saves its index from 0)."""
    epoch = checkpoint.get("epoch")
    return epoch + 1 if isinstance(epoch, int) else None


def _as_current(description: dict[str, Any]) -> dict[str, Any]:
    """A model.json in this release's meaning: a /1 record's checkpoint epoch (from 0) counted from 1."""
    if description.get("format") != FORMAT_1:
        return description
    run = description.get("run") if isinstance(description.get("run"), dict) else {}
    checkpoint = run.get("checkpoint") if isinstance(run.get("checkpoint"), dict) else None
    if checkpoint is not None and isinstance(checkpoint.get("epoch"), int):
        run = {**run, "checkpoint": {**checkpoint, "epoch": checkpoint["epoch"] + 1}}
    return {**description, "format": FORMAT, "run": run}


def _shown(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in arguments.items())


def read_description(directory: str | Path) -> dict[str, Any]:
    """model.json of an export, checked to be one, in this release's meaning (an older format's read as it)."""
    path = Path(directory) / DESCRIPTION
    if not path.is_file():
        raise ExportError(
            f"{directory} holds no exported model (no {DESCRIPTION}). HINT: write one with "
            f"`snakeddp export RUN --to {directory}` (`snakeddp runs` lists the runs)."
        )
    description = read_json(path)
    if not isinstance(description, dict) or description.get("format") not in (FORMAT, FORMAT_1):
        raise ExportError(
            f"{path} is not a snakeddp export ({FORMAT}). HINT: export the run again with `snakeddp export RUN --to "
            f"{directory}`."
        )
    return _as_current(description)


def inputs(directory: str | Path) -> Inputs:
    """How raw rows become the exported model's input: ``snakeddp.inputs(DIR).encode(rows)`` applies the
    layout its dataset's ingestion recorded (category vocabularies, array widths, image size)."""
    description = read_description(directory)
    if "inputs" not in description:
        raise ExportError(
            f"{Path(directory) / DESCRIPTION} records no column layout: the run trained on synthetic data, a custom "
            "DataModule, or a table ingested before layouts were recorded. HINT: give the model its feature tensor."
        )
    return Inputs(description["inputs"])


def load(directory: str | Path) -> pl.LightningModule:
    """The LightningModule exported to ``directory``, built from model.json and filled from model.safetensors
    (nothing unpickled), in eval mode on the CPU."""
    directory = Path(directory)
    description = read_description(directory)
    target, arguments = description["model"]["target"], description["model"]["kwargs"]
    try:
        cls = load_class(target, "model.target", pl.LightningModule)
    except TargetError as error:
        cause = error.__cause__
        why = f"{type(cause).__name__}: {cause}" if cause else "its module has no such LightningModule"
        raise ExportError(
            f"{directory / DESCRIPTION}: the model's class {target} cannot be imported here ({why}). HINT: install "
            "the package that defines it, or add the directory that holds its module to PYTHONPATH."
        ) from error
    weights = directory / description["weights"]["file"]
    if not weights.is_file() or sha256_file(weights) != description["weights"]["sha256"]:
        what = "not the file model.json was written for" if weights.is_file() else "missing"
        run_id = description["run"]["run_id"]
        raise ExportError(
            f"{weights} is {what}. HINT: export the run again with `snakeddp export {run_id} --to {directory}`."
        )
    model = construct(cls, arguments, target, "model.target")
    safetensors.torch.load_model(model, weights, strict=True)
    return model.eval()
