"""Experiment trackers of a run (``tracking:``): TensorBoard, MLflow, Weights & Biases offline.

metrics.csv is always written (``callbacks.EpochMetrics``); these are optional extras, each
needing its package only when enabled. Only rank 0 builds trackers, so no other rank ever
touches a tracking store. What every enabled tracker gets:

- the run config as params (dotted keys such as ``model.lr``, secrets masked),
- every metric the model logs per epoch (train_loss, val_loss, val_acc, ...) plus throughput
  (samples_per_s, epoch_seconds, data_wait_s) at each epoch's end,
- MLflow also gets provenance.json and the best checkpoint as artifacts once the run completes.

The ``tracking`` section is not part of a run's identity: the workflow passes it to the training
processes in the ``SNAKEDDP_TRACKING`` environment variable (``snakeddp.run.variables``), so changing it never
reruns a job.
A resumed attempt continues the same MLflow / W&B run (ids kept in ``tracking/state.json``).

A tracking URI with credentials (``https://user:password@host``) is split: MLflow gets the bare
URI and the credentials through MLFLOW_TRACKING_USERNAME/PASSWORD, so no error message or
record can carry them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger

from snakeddp.config import flatten
from snakeddp.run.layout import RunPaths
from snakeddp.run.requirements import require_tracker
from snakeddp.training.callbacks import EpochMetrics
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.redact import redact_text, scrub

THROUGHPUT = ("samples_per_s", "epoch_seconds", "data_wait_s")


def split_credentials(uri: str) -> tuple[str, str | None, str | None]:
    """'https://u:p@host/x' -> ('https://host/x', 'u', 'p'); URIs without credentials unchanged."""
    parts = urlsplit(uri)
    if not parts.username and not parts.password:
        return uri, None, None
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc)), parts.username, parts.password


def mlflow_uri(configured: str | None, env: Mapping[str, str], run_dir: Path) -> str:
    """Where MLflow logs: the config's URI, else MLFLOW_TRACKING_URI, else the file store results/mlruns."""
    uri = configured or env.get("MLFLOW_TRACKING_URI")
    if not uri:
        return "file:" + str(run_dir.resolve().parent.parent / "mlruns")
    if "://" not in uri and not uri.startswith(("file:", "databricks", "sqlite:")):
        return "file:" + str(Path(uri).resolve())
    return uri


class EpochThroughput(Callback):
    """Sends each epoch's throughput columns of metrics.csv to the trackers."""

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = next((c for c in trainer.callbacks if isinstance(c, EpochMetrics)), None)
        if not trainer.is_global_zero or metrics is None or not metrics.rows:
            return
        row = metrics.rows[-1]
        values = {name: float(row[name]) for name in THROUGHPUT if row.get(name) not in (None, "")}
        for logger in trainer.loggers:
            logger.log_metrics(values, step=trainer.global_step)


class Trackers:
    """The loggers of one rank (none except on rank 0), and what is logged around training."""

    def __init__(
        self, tracking: Mapping[str, Any], run_id: str, run_dir: Path, is_main: bool, env: Mapping[str, str]
    ) -> None:
        self.tracking, self.run_id, self.run_dir = tracking, run_id, run_dir
        self.directory = RunPaths(run_dir).tracking
        self.loggers: list[Logger] = []
        self.mlflow: Any = None
        self.wandb: Any = None
        self.mlflow_uri: str | None = None
        if not is_main:
            return
        state_path = RunPaths(run_dir).tracking_state
        state = read_json(state_path) if state_path.is_file() else {}
        if tracking["tensorboard"]["enabled"]:
            self.loggers.append(self._tensorboard())
        if tracking["mlflow"]["enabled"]:
            self.mlflow = self._mlflow(state.get("mlflow_run_id"), env)
            self.loggers.append(self.mlflow)
        if tracking["wandb"]["enabled"]:
            state.setdefault("wandb_id", uuid.uuid4().hex[:12])
            self.wandb = self._wandb(state["wandb_id"])
            self.loggers.append(self.wandb)
        if self.mlflow is not None:
            state["mlflow_run_id"] = self.mlflow.run_id
        if state:
            atomic_write_json(state_path, state)

    @property
    def callbacks(self) -> list[Callback]:
        return [EpochThroughput()] if self.loggers else []

    def _tensorboard(self) -> Logger:
        require_tracker("tensorboard")
        from lightning.pytorch.loggers import TensorBoardLogger

        return TensorBoardLogger(save_dir=self.directory, name="tensorboard", version="", default_hp_metric=False)

    def _mlflow(self, resume_run_id: str | None, env: Mapping[str, str]) -> Logger:
        require_tracker("mlflow")
        from lightning.pytorch.loggers import MLFlowLogger

        options = self.tracking["mlflow"]
        uri, username, password = split_credentials(mlflow_uri(options["tracking_uri"], env, self.run_dir))
        if username:
            os.environ.setdefault("MLFLOW_TRACKING_USERNAME", username)
        if password:
            os.environ.setdefault("MLFLOW_TRACKING_PASSWORD", password)
        if uri.startswith("file:"):
            # MLflow 3 keeps the file store in maintenance mode behind this opt-in; it needs no
            # database or server, which is what a local run (and mlflow-skinny) has.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.mlflow_uri = uri
        return MLFlowLogger(
            experiment_name=options["experiment"],
            run_name=self.run_id,
            tracking_uri=uri,
            tags={"snakeddp.run_id": self.run_id},
            run_id=resume_run_id,
        )

    def _wandb(self, run_id: str) -> Logger:
        require_tracker("wandb")
        from lightning.pytorch.loggers import WandbLogger

        self.directory.mkdir(parents=True, exist_ok=True)
        return WandbLogger(
            name=self.run_id,
            save_dir=str(self.directory),
            offline=True,
            id=run_id,
            project=self.tracking["wandb"]["project"],
            resume="allow",
        )

    def log_config(self, config: Mapping[str, Any]) -> None:
        """The run config as params: one dotted key per value, secrets masked."""
        params = scrub(flatten(config))
        for logger in self.loggers:
            logger.log_hyperparams(params)

    def finish(self, provenance_path: Path, best_checkpoint: str | None) -> None:
        """After provenance.json is written: MLflow gets it and the best checkpoint as artifacts."""
        if self.mlflow is not None:
            client, run_id = self.mlflow.experiment, self.mlflow.run_id
            client.log_artifact(run_id, str(provenance_path))
            if best_checkpoint and self.tracking["mlflow"]["log_checkpoint"]:
                client.log_artifact(run_id, best_checkpoint, artifact_path="checkpoints")
        if self.wandb is not None:
            self.wandb.experiment.finish()

    def describe(self) -> dict[str, Any]:
        """Where this run was tracked, for provenance (URIs redacted)."""
        return {
            "tensorboard": str(self.directory / "tensorboard") if self.tracking["tensorboard"]["enabled"] else None,
            "mlflow": {
                "tracking_uri": redact_text(self.mlflow_uri or ""),
                "experiment": self.tracking["mlflow"]["experiment"],
                "run_id": self.mlflow.run_id,
            }
            if self.mlflow is not None
            else None,
            "wandb": str(self.directory / "wandb") if self.tracking["wandb"]["enabled"] else None,
        }
