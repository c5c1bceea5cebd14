"""The built-in models: what they log, and that it is exact."""

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from snakeddp.models import build_model


class StepLosses(pl.Callback):
    """The loss and size of every training batch, and train_loss as Lightning reports it per epoch."""

    def __init__(self):
        self.steps, self.epochs = [], []

    def on_train_epoch_start(self, trainer, pl_module):
        self.steps.append([])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps[-1].append((float(outputs["loss"]), len(batch[0])))

    def on_train_epoch_end(self, trainer, pl_module):
        self.epochs.append(float(trainer.callback_metrics["train_loss"]))


@pytest.mark.parametrize("name", ["linear", "mlp"])
def test_train_loss_is_the_sample_weighted_mean_of_each_epochs_steps(name):
    torch.manual_seed(0)
    features, labels = torch.randn(20, 3), torch.randint(0, 2, (20, 1)).float()
    loader = DataLoader(TensorDataset(features, labels), batch_size=7, shuffle=True)  # batches of 7, 7, 6
    model = build_model(
        {"name": name, "hidden_sizes": [4], "optimizer": "sgd", "lr": 0.5, "weight_decay": 0.0},
        {"num_features": 3, "num_classes": 1},
    )
    record = StepLosses()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[record],
    )
    trainer.fit(model, train_dataloaders=loader)
    expected = [sum(loss * n for loss, n in steps) / sum(n for _, n in steps) for steps in record.steps]
    assert len(record.epochs) == 3
    assert record.epochs == pytest.approx(expected, rel=1e-6)
    assert len(set(record.epochs)) == 3, "each epoch reports its own steps only"
