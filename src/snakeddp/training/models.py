"""Models: the built-ins chosen by ``model.name``, or any LightningModule named by ``model.target``.

``linear`` is the reference tutorial's "boring" model (one Linear layer); ``mlp`` is a small
multi-layer perceptron with real compute per step, which scaling studies need; ``cnn`` is a small
ResNet-style network for image columns (snakeddp.training.cnn). All log ``train_loss``, ``val_loss``
and ``val_acc`` as torchmetrics, so values are exact across ranks (sums and counts are all-reduced,
not per-rank means averaged); a multiclass model also keeps each validation's confusion matrix
(``confusion``), which provenance records for the best epoch and the report shows per class.

``model.target: "package.module:ClassName"`` trains your own LightningModule instead, built as
``ClassName(**model.kwargs)`` plus the data's shape: constructor parameters named
``num_features`` or ``num_classes`` receive the dataset's values (from its manifest, or the custom
DataModule's ``task``) unless ``model.kwargs`` gives them. The module must log trainer.monitor's
metric (``val_loss`` unless set): checkpoints and early stopping follow it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric, Metric
from torchmetrics.classification import BinaryAccuracy, MulticlassAccuracy, MulticlassConfusionMatrix

from snakeddp.config import defaults as config_defaults
from snakeddp.config.targets import TargetError, accepted_parameters, construct, load_class
from snakeddp.errors import DataSourceError
from snakeddp.training.cnn import resnet

OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


class StepLoss(Metric):
    """The sample-weighted mean of the training steps' losses, exact across ranks (sum and weight
    are all-reduced when Lightning computes it at the epoch's end).

    MeanMetric does the same with a NaN check on every update (a host sync and half a dozen
    tensor ops): 4.7% of an MLP step in a sampled profile (bench/results.md, 4.). This update is
    two in-place adds; a NaN loss shows as a NaN epoch loss instead of being dropped with a warning.
    """

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("weight", default=torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, loss: torch.Tensor, weight: int) -> None:
        self.total.add_(loss * weight)
        self.weight.add_(weight)

    def compute(self) -> torch.Tensor:
        return self.total / self.weight


class Classifier(pl.LightningModule):
    """Shared training logic; subclasses build ``self.net`` from (num_features, outputs)."""

    def __init__(
        self,
        num_features: int,
        num_classes: int,
        optimizer: str = "adam",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        hidden_sizes: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.binary = num_classes == 1
        self.net = self.build(num_features, num_classes, list(hidden_sizes or []))
        self.train_loss = StepLoss()
        self._train_loss_epoch = -1
        self.val_loss = MeanMetric()
        self.val_acc = BinaryAccuracy() if self.binary else MulticlassAccuracy(num_classes, average="micro")
        # Per class: each validation's confusion matrix (rows true classes, columns predictions), by epoch,
        # kept in checkpoints so a resumed run still has the best epoch's.
        self.val_confusion = None if self.binary else MulticlassConfusionMatrix(num_classes)
        self.confusion: dict[int, list[list[int]]] = {}

    def build(self, num_features: int, outputs: int, hidden_sizes: list[int]) -> nn.Module:
        raise NotImplementedError

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        # Images ([N, C, H, W]) reach the linear model and the mlp as rows of their pixels.
        return self.net(features.flatten(1))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.binary:
            return F.binary_cross_entropy_with_logits(logits, labels)
        return F.cross_entropy(logits, labels)

    def labels(self, labels: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Labels as the loss takes them, from the shapes DataModules yield: binary 0/1 labels shaped
        (N,) or (N, 1), class indices shaped (N,) or (N, 1)."""
        if labels.numel() != len(logits) or labels.dim() > 2:
            kind = "one 0/1 label" if self.binary else "one class index"
            raise DataSourceError(
                f"{type(self).__name__} (model.name) takes {kind} per sample, shaped (N,) or (N, 1); the "
                f"DataModule gave labels shaped {tuple(labels.shape)} for {len(logits)} samples. HINT: yield "
                "(features, labels) batches with one label per sample, or train your own model with model.target."
            )
        if self.binary:
            return labels.reshape(logits.shape).to(logits.dtype)
        return labels.reshape(-1).long()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        features, labels = batch
        logits = self(features)
        loss = self.loss(logits, self.labels(labels, logits))
        self.train_loss.update(loss.detach(), weight=len(features))
        if self._train_loss_epoch != self.current_epoch:
            # Lightning computes (and syncs) a logged metric at the epoch's end from everything
            # update() accumulated, so registering it once per epoch gives the same value; logging
            # it every step nearly doubled the linear model's step time (bench/results.md, 4.).
            self.log("train_loss", self.train_loss, on_step=False, on_epoch=True)
            self._train_loss_epoch = self.current_epoch
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        features, labels = batch
        logits = self(features)
        labels = self.labels(labels, logits)
        self.val_loss.update(self.loss(logits, labels), weight=len(features))
        preds, target = (logits.squeeze(-1), labels.squeeze(-1)) if self.binary else (logits, labels)
        self.val_acc.update(preds, target)
        if self.val_confusion is not None:
            self.val_confusion.update(logits, labels)
        self.log("val_loss", self.val_loss, on_epoch=True)
        self.log("val_acc", self.val_acc, on_epoch=True)

    def on_validation_epoch_end(self) -> None:
        if self.val_confusion is None:
            return
        # compute() sums every rank's counts: the whole validation set's matrix, the same on every rank.
        matrix = self.val_confusion.compute()
        self.val_confusion.reset()
        if not self.trainer.sanity_checking:
            self.confusion[self.current_epoch] = matrix.long().tolist()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["snakeddp_confusion"] = {str(epoch): rows for epoch, rows in self.confusion.items()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get("snakeddp_confusion") or {}
        self.confusion = {int(epoch): rows for epoch, rows in saved.items()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        optimizer = OPTIMIZERS[self.hparams.optimizer]
        return optimizer(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)


class LinearModel(Classifier):
    """The tutorial's BoringModel: one Linear layer from features to class logits."""

    def build(self, num_features: int, outputs: int, hidden_sizes: list[int]) -> nn.Module:
        return nn.Linear(num_features, outputs)


class MLP(Classifier):
    """Linear -> ReLU blocks of ``hidden_sizes`` widths, then a Linear head."""

    def build(self, num_features: int, outputs: int, hidden_sizes: list[int]) -> nn.Module:
        layers: list[nn.Module] = []
        width = num_features
        for hidden in hidden_sizes:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, outputs))
        return nn.Sequential(*layers)


class CNN(Classifier):
    """A small ResNet (snakeddp.training.cnn) on images shaped ``input_shape`` [C, H, W]."""

    def __init__(
        self,
        num_features: int,
        num_classes: int,
        optimizer: str = "adam",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        hidden_sizes: list[int] | None = None,
        input_shape: list[int] | None = None,
        width: int = 32,
        depth: int = 2,
    ) -> None:
        self._shape, self._width, self._depth = list(input_shape or []), width, depth
        super().__init__(num_features, num_classes, optimizer, lr, weight_decay, hidden_sizes)

    def build(self, num_features: int, outputs: int, hidden_sizes: list[int]) -> nn.Module:
        return resnet(self._shape[0], outputs, self._width, self._depth)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


MODELS: dict[str, type[Classifier]] = {"linear": LinearModel, "mlp": MLP, "cnn": CNN}


TASK_PARAMETERS = ("num_features", "num_classes")


def best_confusion(model: pl.LightningModule, epoch: int | None) -> dict[str, Any] | None:
    """The validation confusion matrix a multiclass built-in model kept for ``epoch`` (the best), if any."""
    kept = getattr(model, "confusion", None) if isinstance(model, Classifier) else None
    if not kept or epoch is None or epoch not in kept:
        return None
    return {"epoch": epoch, "matrix": kept[epoch]}


def custom_arguments(cls: type, kwargs: Mapping[str, Any], task: Mapping[str, Any] | None) -> dict[str, Any]:
    """``model.kwargs`` plus the task values the constructor of ``cls`` asks for."""
    wanted = accepted_parameters(cls)
    arguments = dict(kwargs)
    for name in TASK_PARAMETERS:
        if name not in wanted or task is None or name not in task:
            continue
        if name in arguments and arguments[name] != task[name]:
            raise TargetError(
                f"model.kwargs.{name}={arguments[name]!r} contradicts the data, which has {name}={task[name]!r}. "
                f"HINT: leave {name} out of model.kwargs; snakeddp passes the data's value."
            )
        arguments[name] = task[name]
    return arguments


def build_custom_model(target: str, kwargs: Mapping[str, Any], task: Mapping[str, Any] | None) -> pl.LightningModule:
    """``model.target`` built from ``model.kwargs`` plus the task values its constructor asks for."""
    cls = load_class(target, "model.target", pl.LightningModule)
    arguments = custom_arguments(cls, kwargs, task)
    # A DataModule of the user's (data.source: module) has the task values only where it says them: without, the
    # constructor's TypeError came under a HINT to check the config's keyword arguments, which hold none of them.
    needed = inspect.signature(cls.__init__).parameters
    missing = [
        n for n in TASK_PARAMETERS if n in needed and needed[n].default is needed[n].empty and n not in arguments
    ]
    if missing:
        raise TargetError(
            f"model.target={target!r} takes {' and '.join(missing)} from the data, and the DataModule has no `task` "
            f"that gives {'them' if len(missing) > 1 else 'it'}. HINT: set self.task = {{'num_features': ..., "
            f"'num_classes': ...}} in the DataModule's __init__, or give model.kwargs.{missing[0]}."
        )
    return construct(cls, arguments, target, "model.target")


def builtin_arguments(model_cfg: Mapping[str, Any], task: Mapping[str, Any] | None) -> dict[str, Any]:
    """The constructor arguments of the built-in ``model.name``, sized for the data's task."""
    if task is None:
        raise TargetError(
            f"model.name={model_cfg['name']} needs the data's num_features and num_classes, but the DataModule "
            "has no `task`. HINT: give the DataModule a `task` attribute {'num_features': ..., 'num_classes': ...}, "
            "or train your own model with model.target."
        )
    arguments = {
        "num_features": task["num_features"],
        "num_classes": task["num_classes"],
        "optimizer": model_cfg["optimizer"],
        "lr": model_cfg["lr"],
        "weight_decay": model_cfg["weight_decay"],
        "hidden_sizes": model_cfg["hidden_sizes"] if MODELS[model_cfg["name"]] is MLP else [],
    }
    if MODELS[model_cfg["name"]] is not CNN:
        return arguments
    if not task.get("input_shape"):
        raise TargetError(
            "model.name=cnn trains on images, and the data has no image column (its features are "
            f"{task['num_features']} numbers). HINT: use model.name: mlp for these features, or list an image "
            "column in data.table.features."
        )
    # width and depth are left out of a run config at their defaults (config.QUIET_AT_DEFAULT).
    defaults = config_defaults()["model"]
    return arguments | {
        "input_shape": list(task["input_shape"]),
        "width": model_cfg.get("width", defaults["width"]),
        "depth": model_cfg.get("depth", defaults["depth"]),
    }


def build_model(model_cfg: Mapping[str, Any], task: Mapping[str, Any] | None) -> pl.LightningModule:
    """The model the config asks for (``model.target`` if set, else ``model.name``), sized for the data's task."""
    if model_cfg.get("target"):
        return build_custom_model(model_cfg["target"], model_cfg.get("kwargs") or {}, task)
    return MODELS[model_cfg["name"]](**builtin_arguments(model_cfg, task))
