"""A user's own work, written as a user would, for tests/e2e/test_bring_your_own.py: a DataModule of
random images (like torchvision's FakeData) with its own batch size, a small CNN, and Lightning's
BoringModel logging its losses under names of its own. The tests copy this file into the directory
Snakemake runs in, where every rank can import it."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.demos.boring_classes import BoringModel
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class FakeImages(pl.LightningDataModule):
    """Random 3-channel images whose class brightens one quadrant, so a CNN can learn it. It batches
    by its own ``images_per_batch`` and knows nothing of snakeddp's trainer.batch_size."""

    def __init__(self, num_train: int = 192, num_val: int = 64, num_classes: int = 4, images_per_batch: int = 16):
        super().__init__()
        self.num_train, self.num_val = num_train, num_val
        self.num_classes, self.images_per_batch = num_classes, images_per_batch

    def _images(self, count: int, seed: int) -> TensorDataset:
        generator = torch.Generator().manual_seed(seed)
        images = torch.rand(count, 3, 16, 16, generator=generator)
        labels = torch.randint(0, self.num_classes, (count,), generator=generator)
        for quadrant in range(self.num_classes):
            row, col = divmod(quadrant % 4, 2)
            images[labels == quadrant, :, 8 * row : 8 * row + 8, 8 * col : 8 * col + 8] += 0.5
        return TensorDataset(images, labels)

    def setup(self, stage: str) -> None:
        self.train, self.val = self._images(self.num_train, 1), self._images(self.num_val, 2)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.images_per_batch, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.images_per_batch)


class SmallCNN(pl.LightningModule):
    """Two convolutions and a linear head; logs train_loss, val_loss and val_accuracy."""

    def __init__(self, num_classes: int = 4, channels: int = 8, lr: float = 0.01):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
            nn.Flatten(), nn.Linear(4 * channels, num_classes),
        )  # fmt: skip

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        logits = self(images)
        self.log("val_loss", F.cross_entropy(logits, labels), sync_dist=True)
        self.log("val_accuracy", (logits.argmax(-1) == labels).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class RegistryCNN(SmallCNN):
    """SmallCNN whose weights would come from a private registry: it needs the registry's token,
    which it reads from the environment, as snakeddp's HINT asks, and never stores."""

    def __init__(self, num_classes: int = 4, channels: int = 8, lr: float = 0.01):
        super().__init__(num_classes, channels, lr)
        if not os.environ.get("REGISTRY_TOKEN", "").startswith("reg-"):
            raise RuntimeError("RegistryCNN needs REGISTRY_TOKEN (reg-...) in the environment")


class LoggedBoringModel(BoringModel):
    """Lightning's BoringModel, which logs nothing, logging its losses as train_mse and valid_mse."""

    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train_mse", out["loss"], on_step=False, on_epoch=True, sync_dist=True)
        return out

    def validation_step(self, batch, batch_idx):
        out = super().validation_step(batch, batch_idx)
        self.log("valid_mse", out["x"], sync_dist=True)
        return out


class BinaryPoints(pl.LightningDataModule):
    """Points labelled 0/1 by which side of a plane they fall, labels shaped (N,) as most DataModules
    yield them; ``task`` tells snakeddp's built-in models the features and classes."""

    task = {"num_features": 6, "num_classes": 1}

    def __init__(self, batch_size: int, num_train: int = 256, num_val: int = 64):
        super().__init__()
        self.batch_size, self.num_train, self.num_val = batch_size, num_train, num_val

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(3)
        points = torch.randn(self.num_train + self.num_val, 6, generator=generator)
        labels = (points.sum(dim=1) > 0).long()
        self.train = TensorDataset(points[: self.num_train], labels[: self.num_train])
        self.val = TensorDataset(points[self.num_train :], labels[self.num_train :])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size)
