"""The example's own LightningModule: a residual MLP for tables, with its own optimiser.

snakeddp builds it as ``TabularNet(num_features=..., num_classes=..., **model.kwargs)``; the
two task values come from the ingested dataset. Like every model snakeddp trains, it logs
``val_loss`` (checkpoints and early stopping follow it); ``val_acc`` lands in metrics.csv too.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.classification import BinaryAccuracy, MulticlassAccuracy


class ResidualBlock(nn.Module):
    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.SiLU(), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class TabularNet(pl.LightningModule):
    """Normalise raw columns (BatchNorm), then a stack of residual blocks and a linear head."""

    def __init__(
        self,
        num_features: int,
        num_classes: int,
        width: int = 64,
        depth: int = 2,
        dropout: float = 0.1,
        lr: float = 3e-3,
        weight_decay: float = 1e-4,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.binary = num_classes == 1
        self.net = nn.Sequential(
            nn.BatchNorm1d(num_features),
            nn.Linear(num_features, width),
            *(ResidualBlock(width, dropout) for _ in range(depth)),
            nn.LayerNorm(width),
            nn.Linear(width, num_classes),
        )
        self.val_loss = MeanMetric()
        self.val_acc = BinaryAccuracy() if self.binary else MulticlassAccuracy(num_classes, average="micro")

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.binary:
            return F.binary_cross_entropy_with_logits(logits, labels)
        return F.cross_entropy(logits, labels)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        features, labels = batch
        loss = self.loss(self(features), labels)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        features, labels = batch
        logits = self(features)
        self.val_loss.update(self.loss(logits, labels), weight=len(features))
        preds, target = (logits.squeeze(-1), labels.squeeze(-1)) if self.binary else (logits, labels)
        self.val_acc.update(preds, target)
        self.log("val_loss", self.val_loss, on_epoch=True)
        self.log("val_acc", self.val_acc, on_epoch=True)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(self.trainer.max_epochs, 1))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "epoch"}}
