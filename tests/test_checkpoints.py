"""last.ckpt holds the end of the last finished epoch, whatever save_top_k keeps."""

import pytest
import torch
from conftest import assert_valid_provenance
from launching import launch, prepare

from snakeddp.hashing import sha256_file

pytestmark = pytest.mark.e2e

EPOCHS = 6


@pytest.mark.parametrize("save_top_k", [0, 1, None])
def test_last_checkpoint_holds_the_final_epoch(tmp_path, save_top_k):
    # A learning rate this high makes val_loss go up and down, so the final epoch is rarely a top-k one.
    trainer = {"max_epochs": EPOCHS, "early_stopping": {"enabled": False}}
    if save_top_k is not None:
        trainer["save_top_k"] = save_top_k
    run_yaml, manifest, run_dir = prepare(tmp_path, {"trainer": trainer, "model": {"lr": 0.5}})
    done = launch(run_yaml, manifest, run_dir, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    last = run_dir / "checkpoints" / "last.ckpt"
    # Our own file, and weights_only refuses anything but tensors and plain containers.
    state = torch.load(last, weights_only=True)
    assert state["epoch"] == EPOCHS - 1
    (record,) = assert_valid_provenance(tmp_path)
    assert record["training"]["last_checkpoint"]["sha256"] == sha256_file(last)
    top_k = sorted(p.name for p in last.parent.glob("epoch*.ckpt"))
    assert len(top_k) == (2 if save_top_k is None else save_top_k), top_k
