"""snakeddp.training.safe_load: no checkpoint load runs code, on any strategy; damage is one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from snakeddp.errors import CheckpointError
from snakeddp.training.safe_load import check_checkpoint


class _Payload:
    """Unpickling this touches ``marker``: a stand-in for any code a crafted checkpoint runs."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def crafted(path: Path, marker: Path) -> Path:
    torch.save({"state_dict": {"w": torch.zeros(2)}, "epoch": 3, "payload": _Payload(marker)}, path)
    return path


def test_lightnings_fsdp_loader_runs_a_crafted_checkpoint_which_is_why_it_is_checked_first(tmp_path):
    from lightning.fabric.utilities.load import _lazy_load  # what FSDPStrategy.load_checkpoint calls

    marker = tmp_path / "ran"
    _lazy_load(crafted(tmp_path / "last.ckpt", marker))
    assert marker.exists(), "Lightning's lazy loader no longer runs pickled code: safe_load's premise changed"


def test_a_crafted_checkpoint_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    path = crafted(tmp_path / "last.ckpt", marker)
    with pytest.raises(CheckpointError) as error:
        check_checkpoint(path)
    assert not marker.exists()
    message = str(error.value)
    assert "\n" not in message and f"HINT: delete it (rm {path})" in message
    assert "weights_only=False" not in message and "other than tensors" in message


@pytest.mark.parametrize(
    "damage", [lambda data: b"", lambda data: data[: len(data) // 2], lambda data: b"not a checkpoint at all"]
)
def test_a_damaged_checkpoint_is_one_line_naming_it(tmp_path, damage):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"w": torch.ones(1000)}, "epoch": 3}, path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError, match=r"last\.ckpt: this checkpoint is damaged or incomplete.*HINT: delete it"):
        check_checkpoint(path)


def test_a_lightning_checkpoint_passes(tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel

    trainer = pl.Trainer(
        max_epochs=1, limit_train_batches=2, limit_val_batches=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path, enable_checkpointing=False,
    )  # fmt: skip
    trainer.fit(BoringModel())
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    check_checkpoint(tmp_path / "last.ckpt")
