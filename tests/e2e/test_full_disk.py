"""A full disk, typed as `snakemake --profile profiles/local`: results/ on a real 16 MiB tmpfs that fills at a
checkpoint of a two-process DDP run. The run ends in one line of snakeddp's naming the checkpoint and the space
left, with no traceback on the console (the traceback is kept beside the line); every checkpoint left behind
loads; and once space is freed, as the HINT says, the same command resumes and trains every epoch once.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest
import torch

from tests.checkout import Checkout
from tests.helpers import tmpfs

pytestmark = pytest.mark.e2e

EPOCHS = 3
# About 850 KB per checkpoint (the model and Adam's two moments): more than the disk keeps free once it is filled.
RUN = {
    "data": {"num_train_files": EPOCHS, "num_records_per_train_file": 300, "num_val_records": 200, "num_features": 16},
    "model": {"target": "fills:FillsTheDisk", "kwargs": {"hidden_sizes": [256, 256]}},
    "trainer": {"max_epochs": EPOCHS, "batch_size": 32, "early_stopping": {"enabled": False}},
    "launch": {"mem_mb": 1000, "runtime": 10, "accelerator": "cpu", "devices": 2},
}
# Room for what a rank writes when it stops, and none at all (a tmpfs page: the failing rank's line takes it, and
# the launcher's record of the try finds none, and must not say its own line instead of the rank's).
LEFT_FREE = (128 * 1024, 4096)
FILL_ONCE = "fill-once"
FILLER = "results/filler"
# The built-in mlp, whose rank 0 fills results/ to LEFT_FREE bytes as the second epoch starts, while FILL_ONCE is
# there (another job's output filling a shared scratch disk): the second epoch's checkpoint then finds no room.
FILLS = f"""
import os
from pathlib import Path

from snakeddp.training.models import MLP


class FillsTheDisk(MLP):
    def on_train_epoch_start(self):
        marker = Path({FILL_ONCE!r})
        if self.global_rank == 0 and self.current_epoch == 1 and marker.exists():
            left_free = int(marker.read_text())
            marker.unlink()
            disk = os.statvfs("results")
            with open({FILLER!r}, "wb") as filler:
                os.posix_fallocate(filler.fileno(), 0, disk.f_bavail * disk.f_frsize - left_free)
"""


@pytest.fixture
def small_disk(tmp_path):
    checkout = Checkout(tmp_path)
    with tmpfs(tmp_path / "results", "size=16m"):
        yield checkout


def epochs(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv") as handle:
        return [int(row["epoch"]) for row in csv.DictReader(handle)]


@pytest.mark.parametrize("left_free", LEFT_FREE)
def test_a_disk_that_fills_at_a_checkpoint_ends_in_one_line_and_the_rerun_resumes_every_epoch_once(
    small_disk, left_free
):
    root = small_disk.root
    small_disk.write_config(RUN)
    (root / "fills.py").write_text(FILLS)
    (root / FILL_ONCE).write_text(str(left_free))
    run_dir = root / "results/runs/base"

    full = small_disk.snakemake("--profile", "profiles/local")
    output = full.stdout
    assert full.returncode == 1, output[-3000:]
    assert not (root / FILL_ONCE).exists(), "the disk was filled"
    lines = [line for line in output.splitlines() if "no space left" in line]
    assert len(lines) == 1, output[-3000:]
    (line,) = lines
    # The second epoch's top-k checkpoint is saved before its last.ckpt (Lightning's order), where it ranks first.
    written = r"results/runs/base/checkpoints/(epoch002-val_loss[0-9.]+|last)\.ckpt"
    assert re.match(rf"snakeddp\.train: no space left on the device writing the checkpoint {written} \(", line), line
    free, total = line.split(" (", 1)[1].split(" on ", 1)[0].split(" free of ")
    assert free == f"{left_free / 1024:.1f} KiB" and total == "16.0 MiB", line
    assert f"on {root / 'results'}). HINT: free space there, then run the same command again" in line, line
    for crash in ("Traceback", "[rank", "Exception raised from", "RuntimeError"):
        assert crash not in output, output[-3000:]
    if left_free > 4096:  # else the line took the last page, and the traceback had none
        kept = (run_dir / "failure.traceback").read_text()
        assert "OSError: [Errno 28] No space left on device" in kept and "save_checkpoint" in kept, kept

    # Nothing half-written under a final name: no partial file, and every checkpoint left loads.
    left = sorted(path.name for path in (run_dir / "checkpoints").iterdir())
    assert not [name for name in left if name.startswith(".")], left
    assert len(left) == 3 and left[0].startswith("epoch001-") and left[1:] == ["last.ckpt", "last.json"], left
    for checkpoint in (run_dir / "checkpoints").glob("*.ckpt"):
        assert torch.load(checkpoint, weights_only=True)["epoch"] == 0, checkpoint

    os.unlink(root / FILLER)  # the HINT: free space there, then run the same command again
    rerun = small_disk.snakemake("--profile", "profiles/local")
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert f"base: training from epoch 2/{EPOCHS} on 2 processes" in rerun.stdout, rerun.stdout[-3000:]
    assert epochs(run_dir) == list(range(EPOCHS)), "every epoch once"
    assert (root / "results/report/report.html").is_file()
    assert not (run_dir / "failure.traceback").exists(), "the rerun's try starts without the last one's"
