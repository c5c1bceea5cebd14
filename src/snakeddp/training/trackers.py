"""Experiment trackers of a run (``tracking:``): TensorBoard, MLflow, Weights & Biases offline.

metrics.csv is always written (``callbacks.EpochMetrics``); these are optional extras, each
needing its package only when enabled. Only rank 0 builds trackers, so no other rank ever
touches a tracking store. What every enabled tracker gets:

- the run config as params, once each: its dotted keys (``model.lr``), secrets masked. Lightning's
  own call with the model's hyperparameters (``lr``, ``hidden_sizes``) is dropped: the config holds
  them already, and both calls sent each setting twice under two names (``lr`` and ``model.lr``);
- each epoch's row of metrics.csv at its end: every metric the model logged (train_loss, val_loss,
  val_acc, ...), the learning rate and the throughput (samples_per_s, epoch_seconds, data_wait_s),
  all at one step, the epoch counted from 1 as the terminal shows it (metrics.csv's ``epoch`` + 1).
  Lightning's own calls are dropped: each of them carried its own global step, so the same epoch's
  train and val metrics landed at steps 3 and 4; step-level values (``on_step=True``) are not sent;
- MLflow also gets provenance.json and the best checkpoint as artifacts once the run completes, and
  with ``register_model`` the exported best model as a new version of that registered model
  (``training.registry``).

The ``tracking`` section is not part of a run's identity: the workflow passes it to the training
processes in the ``SNAKEDDP_TRACKING`` environment variable (``snakeddp.run.variables``), so changing it never
reruns a job.
A resumed attempt continues the same MLflow / W&B run (ids kept in ``tracking/state.json``).

A tracking URI with credentials (``https://user:password@host``) is split: MLflow gets the bare
URI and the credentials through MLFLOW_TRACKING_USERNAME/PASSWORD, so no error message or
record can carry them. A server that does not answer stops rank 0 in seconds with one line
(``run.mlflow_server.check_reachable``) before MLflow's client would retry for minutes.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger

from snakeddp.config import applying, flatten, parts
from snakeddp.errors import ConfigError
from snakeddp.run.layout import RunPaths
from snakeddp.run.mlflow_server import check_reachable, mlflow_uri, split_credentials
from snakeddp.run.requirements import require_tracker
from snakeddp.run.runs import LEADING
from snakeddp.training import registry
from snakeddp.training.callbacks import EpochMetrics
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.redact import redact_text, scrub
from snakeddp.util.terminal import say

# How often a tracker that stopped answering is asked again, at an epoch's end (EpochAxis).
RETRY_S = 60.0
# MLflow's client retries a request 7 times with a backoff factor of 2 (4 min 14 s, then it raises): a server
# gone mid-run held every epoch's end that long. Twice, 1 s then 2 s apart, unless the user set otherwise.
MLFLOW_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


class EpochAxis:
    """Mixed in before a Lightning logger: Lightning's own calls of log_hyperparams and log_metrics
    are dropped (see the module's docstring); snakeddp logs through log_params and log_epoch.

    A tracker that stops answering mid-run (an MLflow server gone) does not stop the training: its epochs wait
    in a backlog, said once in one line, and are sent, in order, once it answers again (asked at an epoch's end
    at most every RETRY_S, and once more as the fit ends). MLflow's client would retry each request for minutes
    and then raise in the epoch's end, before the epoch's checkpoint: the run lost the epoch and stopped."""

    _failed_at: float | None = None

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's call with the model's hyperparameters: the run config holds them already."""

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Lightning's calls, each at its global step: metrics.csv's rows go instead, at their epoch."""

    def log_params(self, params: Mapping[str, Any]) -> None:
        super().log_hyperparams(params)  # type: ignore[misc]

    @property
    def unsent(self) -> list[tuple[dict[str, float], int]]:
        """The epochs' rows the tracker has not got yet, oldest first (kept in the instance: Lightning's loggers
        are built by their own __init__, which this mixin does not extend)."""
        return self.__dict__.setdefault("_unsent", [])

    def log_epoch(self, metrics: Mapping[str, float], epoch: int) -> None:
        self.unsent.append((dict(metrics), epoch))
        if self._failed_at is None or time.monotonic() - self._failed_at >= RETRY_S:
            self._send_unsent()

    def finalize(self, status: str) -> None:
        """Lightning's end of the fit: the backlog's last chance, and the tracker's own end, neither of which may
        fail a run that trained."""
        if self.unsent:
            self._send_unsent()
        if self._failed_at is None:
            try:
                super().finalize(status)  # type: ignore[misc]
            except Exception as error:  # any failure of the tracker's client: the run trained
                self._unanswered(error)

    def _send_unsent(self) -> None:
        unsent = self.unsent
        try:
            while unsent:
                metrics, epoch = unsent[0]
                super().log_metrics(metrics, step=epoch)  # type: ignore[misc]
                unsent.pop(0)
        except Exception as error:  # the tracker's client, whatever it raises
            self._unanswered(error)
            return
        if self._failed_at is not None:
            self._failed_at = None
            say(f"snakeddp.train: {tracker_name(self)} answers again; the epochs it missed are sent")

    def _unanswered(self, error: BaseException) -> None:
        first = self._failed_at is None
        self._failed_at = time.monotonic()
        if first:
            waiting = ", ".join(str(epoch) for _, epoch in self.unsent) or "none"
            say(
                f"snakeddp.train: {tracker_name(self)} stopped answering ({reason(error)}); training goes on, "
                f"metrics.csv keeps every epoch, and the epochs it has not got (now: {waiting}) are sent when it "
                "answers again. HINT: start the tracking server again; nothing else is needed."
            )


def tracker_name(logger: object) -> str:
    """A tracker as a line names it: MLflow by its server (credentials masked), any other by its class."""
    uri = getattr(logger, "_tracking_uri", None)
    return f"MLflow at {redact_text(uri)}" if uri else type(logger).__name__.removesuffix("Logger")


def reason(error: BaseException) -> str:
    """A tracker client's error, on one line and cut short (MLflow's repeats the request and urllib3's pool)."""
    said = redact_text(" ".join(f"{type(error).__name__}: {error}".split()))
    return said if len(said) <= 240 else said[:240] + "..."


def on_epoch_axis(cls: type[Logger]) -> type[Logger]:
    """``cls`` with EpochAxis mixed in."""
    return type(cls.__name__, (EpochAxis, cls), {"__doc__": cls.__doc__})


def epoch_values(row: Mapping[str, Any]) -> dict[str, float]:
    """What trackers get of a metrics.csv row: every number but the counts and stamps around the metrics."""
    skip = {*LEADING, "world_size", "finished_at"}
    return {k: float(v) for k, v in row.items() if k not in skip and isinstance(v, int | float)}


class EpochRows(Callback):
    """Sends each epoch's row of metrics.csv to the trackers, at step epoch + 1 (the terminal's count).
    After EpochMetrics in the Trainer's callbacks, so the row is there."""

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = next((c for c in trainer.callbacks if isinstance(c, EpochMetrics)), None)
        if not trainer.is_global_zero or metrics is None or not metrics.rows:
            return
        row = metrics.rows[-1]
        for logger in trainer.loggers:
            if isinstance(logger, EpochAxis):
                logger.log_epoch(epoch_values(row), int(row["epoch"]) + 1)


class Trackers:
    """The loggers of one rank (none except on rank 0), and what is logged around training."""

    def __init__(
        self, tracking: parts.Tracking, run_id: str, run_dir: Path, is_main: bool, env: Mapping[str, str]
    ) -> None:
        self.tracking, self.run_id, self.run_dir = tracking, run_id, run_dir
        self.directory = RunPaths(run_dir).tracking
        self.loggers: list[Logger] = []
        self.mlflow: Any = None
        self.wandb: Any = None
        self.mlflow_uri: str | None = None
        self.state_path = RunPaths(run_dir).tracking_state
        self.state: dict[str, Any] = {}
        if not is_main:
            return
        state = self.state = read_json(self.state_path) if self.state_path.is_file() else {}
        if tracking.tensorboard.enabled:
            self.loggers.append(self._tensorboard())
        if tracking.mlflow.enabled:
            self.mlflow = self._mlflow(state.get("mlflow_run_id"), env)
            self.loggers.append(self.mlflow)
        if tracking.wandb.enabled:
            state.setdefault("wandb_id", uuid.uuid4().hex[:12])
            self.wandb = self._wandb(state["wandb_id"])
            self.loggers.append(self.wandb)
        if self.mlflow is not None:
            state["mlflow_run_id"] = self.mlflow.run_id
        if state:
            atomic_write_json(self.state_path, state)

    @property
    def callbacks(self) -> list[Callback]:
        return [EpochRows()] if self.loggers else []

    def _tensorboard(self) -> Logger:
        require_tracker("tensorboard")
        from lightning.pytorch.loggers import TensorBoardLogger

        return on_epoch_axis(TensorBoardLogger)(
            save_dir=self.directory, name="tensorboard", version="", default_hp_metric=False
        )

    def _mlflow(self, resume_run_id: str | None, env: Mapping[str, str]) -> Logger:
        require_tracker("mlflow")
        from lightning.pytorch.loggers import MLFlowLogger

        options = self.tracking.mlflow
        uri, username, password = split_credentials(mlflow_uri(options.tracking_uri, env, self.run_dir))
        if username:
            os.environ.setdefault("MLFLOW_TRACKING_USERNAME", username)
        if password:
            os.environ.setdefault("MLFLOW_TRACKING_PASSWORD", password)
        if uri.startswith("file:"):
            # MLflow 3 keeps the file store in maintenance mode behind this opt-in; it needs no
            # database or server, which is what a local run (and mlflow-skinny) has.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.mlflow_uri = uri
        for name, value in MLFLOW_RETRIES.items():
            os.environ.setdefault(name, value)
        check_reachable(uri)
        return on_epoch_axis(MLFlowLogger)(
            experiment_name=options.experiment,
            run_name=self.run_id,
            tracking_uri=uri,
            tags={"snakeddp.run_id": self.run_id},
            run_id=resume_run_id,
        )

    def _wandb(self, run_id: str) -> Logger:
        require_tracker("wandb")
        from lightning.pytorch.loggers import WandbLogger

        self.directory.mkdir(parents=True, exist_ok=True)
        return on_epoch_axis(WandbLogger)(
            name=self.run_id,
            save_dir=str(self.directory),
            offline=True,
            id=run_id,
            project=self.tracking.wandb.project,
            resume="allow",
        )

    def log_config(self, config: Mapping[str, Any]) -> None:
        """The run config as params: one dotted key per value, secrets masked, none that means nothing in this run
        (a table run's generator keys). Lists as their JSON text: Lightning's loggers flatten a list again, and
        drop an empty one (data.table.features: [])."""
        flat = scrub(flatten(applying(config)))
        params = {k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in flat.items()}
        for logger in self.loggers:
            logger.log_params(params)

    def finish(self, provenance_path: Path, best_checkpoint: str | None) -> dict[str, Any] | None:
        """After provenance.json is written: MLflow gets it and the best checkpoint as artifacts, and
        with register_model the exported best model as a new version; returns that registration."""
        registered = None
        if self.mlflow is not None:
            try:
                registered = self._mlflow_finish(provenance_path, best_checkpoint)
            except ConfigError:
                raise  # the registry's own refusal (a name it does not take): a line of its own, the rerun registers
            except Exception as error:  # the tracker's client, whatever it raises: the run trained
                missed = ", ".join(str(epoch) for _, epoch in self.mlflow.unsent)
                say(
                    f"snakeddp.train: {tracker_name(self.mlflow)} did not answer as the run ended ({reason(error)}): "
                    f"its run {self.mlflow.run_id} lacks provenance.json, the best checkpoint"
                    f"{', the registered model' if self.tracking.mlflow.register_model else ''}"
                    f"{f' and epochs {missed}' if missed else ''}. HINT: the run is complete here: "
                    f"{RunPaths(self.run_dir).metrics} and {provenance_path} hold all of it."
                )
        if self.wandb is not None:
            self.wandb.experiment.finish()
        return registered

    def _mlflow_finish(self, provenance_path: Path, best_checkpoint: str | None) -> dict[str, Any] | None:
        if self.mlflow.unsent:
            raise ConnectionError(f"epochs {', '.join(str(e) for _, e in self.mlflow.unsent)} were never sent")
        client, run_id = self.mlflow.experiment, self.mlflow.run_id
        client.log_artifact(run_id, str(provenance_path))
        if best_checkpoint and self.tracking.mlflow.log_checkpoint:
            client.log_artifact(run_id, best_checkpoint, artifact_path="checkpoints")
        name = self.tracking.mlflow.register_model
        if not name:
            return None
        registered = registry.register(client, run_id, self.run_dir, name)
        self.state["registered_model"] = registered
        atomic_write_json(self.state_path, self.state)
        return registered

    def describe(self) -> dict[str, Any]:
        """Where this run was tracked, for provenance (URIs redacted)."""
        return {
            "tensorboard": str(self.directory / "tensorboard") if self.tracking.tensorboard.enabled else None,
            "mlflow": {
                "tracking_uri": redact_text(self.mlflow_uri or ""),
                "experiment": self.tracking.mlflow.experiment,
                "run_id": self.mlflow.run_id,
                "register_model": self.tracking.mlflow.register_model,
            }
            if self.mlflow is not None
            else None,
            "wandb": str(self.directory / "wandb") if self.tracking.wandb.enabled else None,
        }
