"""A full disk, typed as `snakemake --profile profiles/local`: results/ on a real 16 MiB tmpfs that fills at a
checkpoint of a two-process DDP run. The run ends in one line of snakeddp's naming the checkpoint and the space
left, with no traceback on the console (the traceback is kept beside the line); every checkpoint left behind
loads; and once space is freed, as the HINT says, the same command resumes from the newest checkpoint saved and
trains every epoch once: where the epoch's top-k checkpoint fitted and its last.ckpt did not, from the top-k one.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from pathlib import Path

import pytest
import torch

from snakeddp.util.numbers import readable
from tests.checkout import Checkout
from tests.chromium import table_rows
from tests.helpers import tmpfs

pytestmark = pytest.mark.e2e

EPOCHS = 3
# About 850 KB per checkpoint (the model and Adam's two moments): more than the disk keeps free once it is filled.
RUN = {
    "data": {"num_train_files": EPOCHS, "num_records_per_train_file": 300, "num_val_records": 200, "num_features": 16},
    "model": {"target": "fills:FillsTheDisk", "kwargs": {"hidden_sizes": [256, 256]}},
    # Every epoch in the top-k: none is removed (which would free room for last.ckpt) when a later one ranks.
    "trainer": {"max_epochs": EPOCHS, "batch_size": 32, "save_top_k": EPOCHS, "early_stopping": {"enabled": False}},
    "launch": {"mem_mb": 1000, "runtime": 10, "accelerator": "cpu", "devices": 2},
}
# Room for the second epoch's top-k checkpoint and what a rank writes when it stops (its last.ckpt does not fit), and
# none at all (a tmpfs page: the top-k checkpoint does not fit, the failing rank's line takes it, and the launcher's
# record of the try finds none, and must not say its own line instead of the rank's).
PAGE = 4096
BEYOND_A_CHECKPOINT = 128 * 1024
LEFT_FREE = (f"{BEYOND_A_CHECKPOINT}+checkpoint", str(PAGE))
FILL_ONCE = "fill-once"
FILLER = "results/filler"
# The built-in mlp, whose rank 0 fills results/ to LEFT_FREE bytes (+checkpoint: and the pages of the first epoch's
# last.ckpt) as the second epoch starts, while FILL_ONCE is there (another job's output filling a shared scratch
# disk): the second epoch's checkpoints then find no room.
FILLS = f"""
import math
import os
from pathlib import Path

from snakeddp.training.models import MLP


class FillsTheDisk(MLP):
    def on_train_epoch_start(self):
        marker = Path({FILL_ONCE!r})
        if self.global_rank == 0 and self.current_epoch == 1 and marker.exists():
            left, _, checkpoint = marker.read_text().partition("+")
            left_free = int(left)
            if checkpoint:
                last = os.path.getsize("results/runs/base/checkpoints/last.ckpt")
                left_free += math.ceil(last / {PAGE}) * {PAGE}
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


def pages(path: Path) -> int:
    """What a file takes on the tmpfs."""
    return math.ceil(path.stat().st_size / PAGE) * PAGE


@pytest.mark.parametrize("left_free", LEFT_FREE, ids=["top-k-fits", "a-page"])
def test_a_disk_that_fills_at_a_checkpoint_ends_in_one_line_and_the_rerun_resumes_every_epoch_once(
    small_disk, left_free
):
    root = small_disk.root
    small_disk.write_config(RUN)
    (root / "fills.py").write_text(FILLS)
    (root / FILL_ONCE).write_text(left_free)
    run_dir = root / "results/runs/base"
    checkpoints = run_dir / "checkpoints"
    top_k_fits = left_free.endswith("+checkpoint")

    full = small_disk.snakemake("--profile", "profiles/local")
    output = full.stdout
    assert full.returncode == 1, output[-3000:]
    assert not (root / FILL_ONCE).exists(), "the disk was filled"
    lines = [line for line in output.splitlines() if "no space left" in line]
    assert len(lines) == 1, output[-3000:]
    (line,) = lines
    # The second epoch's top-k checkpoint is saved before its last.ckpt (Lightning's order).
    written = r"last" if top_k_fits else r"epoch002-val_loss[0-9.]+"
    written = rf"results/runs/base/checkpoints/{written}\.ckpt"
    assert re.match(rf"snakeddp\.train: no space left on the device writing the checkpoint {written} \(", line), line
    free, total = line.split(" (", 1)[1].split(" on ", 1)[0].split(" free of ")
    # Where the top-k checkpoint fitted, it took its pages of what the first epoch's last.ckpt left.
    (second,) = checkpoints.glob("epoch002-*.ckpt") if top_k_fits else [None]
    room = BEYOND_A_CHECKPOINT + pages(checkpoints / "last.ckpt") - pages(second) if top_k_fits else PAGE
    assert free == f"{room / 1024:.1f} KiB" and total == "16.0 MiB", line
    assert f"on {root / 'results'}). HINT: free space there, then run the same command again" in line, line
    for crash in ("Traceback", "[rank", "Exception raised from", "RuntimeError"):
        assert crash not in output, output[-3000:]
    if top_k_fits:  # else the line took the last page, and the traceback had none
        kept = (run_dir / "failure.traceback").read_text()
        assert "OSError: [Errno 28] No space left on device" in kept and "save_checkpoint" in kept, kept

    # Nothing half-written under a final name: no partial file, and every checkpoint left loads.
    left = sorted(path.name for path in checkpoints.iterdir())
    assert not [name for name in left if name.startswith(".")], left
    saved = ["epoch001", "epoch002"] if top_k_fits else ["epoch001"]
    assert [name.split("-")[0] for name in left[:-2]] == saved and left[-2:] == ["last.ckpt", "last.json"], left
    epoch_of = {path.name: torch.load(path, weights_only=True)["epoch"] for path in checkpoints.glob("*.ckpt")}
    assert epoch_of == {left[0]: 0, left[-2]: 0, **({left[1]: 1} if top_k_fits else {})}, epoch_of
    newest = left[1] if top_k_fits else "last.ckpt"
    named = json.loads((checkpoints / "last.json").read_text()).get("checkpoint")

    os.unlink(root / FILLER)  # the HINT: free space there, then run the same command again
    rerun = small_disk.snakemake("--profile", "profiles/local")
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    # From the newest checkpoint saved whole: the second epoch's top-k one where it fitted, not the last.ckpt
    # before it (which would train the second epoch again).
    resumed = 3 if top_k_fits else 2
    assert f"base: training from epoch {resumed}/{EPOCHS} on 2 processes" in rerun.stdout, rerun.stdout[-3000:]
    assert named == newest, "last.json names the checkpoint the rerun resumed"
    record = json.loads((run_dir / "provenance.json").read_text())
    assert record["training"]["resumed_from"]["path"] == f"checkpoints/{newest}"
    assert epochs(run_dir) == list(range(EPOCHS)), "every epoch once"
    assert (root / "results/report/report.html").is_file()
    # The first try's record was kept where the disk had room for it.
    tried = ["failed", "completed"] if top_k_fits else ["completed"]
    assert [t["outcome"] for t in record["attempt"]["tries"]] == tried
    if top_k_fits:  # its losses counted from the checkpoint it kept, the second epoch's top-k one, both of them
        first = record["attempt"]["tries"][0]
        assert first["account"]["buckets"]["disruption_lost_s"] == 0.0, first
        assert record["timing"]["goodput"]["lost"]["failed"]["steps"] == 0, record["timing"]["goodput"]
    assert_times_say_what_they_cover(root / "results/report", record, run_dir)
    assert not (run_dir / "failure.traceback").exists(), "the rerun's try starts without the last one's"


def assert_times_say_what_they_cover(report: Path, record: dict, run_dir: Path) -> None:
    """A run of two tries, the first's epochs kept: each time is one measurement, the same in runs.csv, the page and
    the record, and its label says what it covers. trainer.fit (and timing.phases) is the last try's; the training
    loops are metrics.csv's, every epoch the final model went through, the first try's included."""
    timing, tried = record["timing"], record["attempt"]["tries"]
    with (report / "runs.csv").open() as handle:
        (row,) = csv.DictReader(handle)
    with (run_dir / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert float(row["duration_s"]) == timing["duration_s"] <= tried[-1]["seconds"]
    assert float(row["train_loop_s"]) == timing["train_seconds"]
    assert timing["train_seconds"] == pytest.approx(sum(float(r["train_seconds"]) for r in rows), abs=0.002)
    assert rows[0]["finished_at"] < tried[-1]["started_at"], "an epoch of the first try is among the loops"
    labels, (cells,) = table_rows((report / "report.html").read_text(), "time-table")
    assert labels[1:3] == ["trainer.fit s, last try", "training loops s, every epoch"]
    assert all(label.endswith(", last try") for label in labels[3:]) and len(set(labels)) == len(labels), labels
    assert cells[1:3] == [readable(timing["duration_s"]), readable(timing["train_seconds"])]
    assert cells[labels.index("training loop s, last try")] == readable(timing["phases"]["train_loop_s"])
