"""The baseline of bench 11: the sweep's models trained by hand, one after another, in one Python process.

    python -m bench.baselines.handwritten_sweep --out DIR --lrs 0.001,0.002 --epochs 2 --records 300 --features 8

What a user writes without a workflow: one script that imports torch and Lightning once and loops
over the learning rates. Each model is the sweep's (an MLP with one hidden layer of 16, Adam, a
binary label), trained for ``--epochs`` epochs of ``--records`` samples with a validation pass,
a CSV log and a checkpoint every epoch, as the workflow's runs do; no data files, checksums,
environment records, provenance or report. Prints one JSON line: seconds in the imports and in
each fit.
"""

from __future__ import annotations

import argparse
import json
import time

started = time.perf_counter()

import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

imported = time.perf_counter()


class Model(L.LightningModule):
    def __init__(self, features: int, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, 1))

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return nn.functional.binary_cross_entropy_with_logits(self.net(x).squeeze(1), y)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        return self.loss(batch)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> None:
        self.log("val_loss", self.loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def data(records: int, features: int, teacher: torch.Tensor, seed: int) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(records, features, generator=generator)
    return DataLoader(TensorDataset(x, (x @ teacher > 0).float()), batch_size=32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--lrs", required=True, help="learning rates, comma-separated")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--val-records", type=int, default=200)
    parser.add_argument("--features", type=int, default=8)
    args = parser.parse_args()
    teacher = torch.randn(args.features, generator=torch.Generator().manual_seed(0))
    train, val = data(args.records, args.features, teacher, 1), data(args.val_records, args.features, teacher, 2)
    fits = []
    for lr in map(float, args.lrs.split(",")):
        L.seed_everything(42, verbose=False)
        trainer = L.Trainer(
            max_epochs=args.epochs,
            accelerator="cpu",
            devices=1,
            logger=CSVLogger(args.out, name=f"lr-{lr}"),
            default_root_dir=f"{args.out}/lr-{lr}",
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        begun = time.perf_counter()
        trainer.fit(Model(args.features, lr), train, val)
        fits.append(time.perf_counter() - begun)
    print(json.dumps({"imports_s": imported - started, "fit_s": fits}))


if __name__ == "__main__":
    main()
