"""What a training process imports: torchmetrics without transformers and matplotlib (snakeddp.training.lean_imports),
and no tracker a run does not use, seen in a real run's processes.

transformers is not in snakeddp's locks: a stand-in distribution of it (a package and its metadata, version 4.46)
goes first on the import path, where torchmetrics finds it as it would find a real one (the GPU image has one).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from snakeddp.run.variables import WARM_START
from tests.helpers import SRC, subprocess_env
from tests.training_runs import Run

#: Imported only by the metrics and plots a run of snakeddp's models never computes.
LEFT_OUT = ("transformers", "matplotlib")
#: Trackers a run imports only when trainer.trackers names them.
TRACKERS = ("mlflow", "wandb", "tensorboard", "tensorboardX")


def standin_transformers(root: Path) -> Path:
    """A transformers distribution with what torchmetrics imports of it at its own import."""
    package, metadata = root / "transformers", root / "transformers-4.46.0.dist-info"
    package.mkdir(parents=True)
    metadata.mkdir()
    (package / "__init__.py").write_text('__version__ = "4.46.0"\nclass AutoModel: ...\nclass AutoTokenizer: ...\n')
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.46.0\n")
    return root


PROBE = """
import json, sys
if sys.argv[1] == "lean":
    from snakeddp.training.lean_imports import import_torchmetrics
    import_torchmetrics()
import lightning.pytorch
imported = {name: name in sys.modules for name in ("transformers", "matplotlib")}
import matplotlib, torch, transformers
from torchmetrics.classification import BinaryAccuracy
accuracy = float(BinaryAccuracy()(torch.tensor([0.9, 0.2, 0.7]), torch.tensor([1, 0, 0])))
print(json.dumps({"imported": imported, "afterwards": transformers.__version__, "accuracy": accuracy}))
"""


def probe(tmp_path: Path, mode: str) -> dict:
    path = os.pathsep.join([str(SRC), str(standin_transformers(tmp_path / mode))])
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], env=subprocess_env(PYTHONPATH=path), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_lightning_imported_after_lean_torchmetrics_leaves_transformers_and_matplotlib_out(tmp_path):
    plain, lean = probe(tmp_path, "plain"), probe(tmp_path, "lean")
    assert plain["imported"] == {name: True for name in LEFT_OUT}, "without it, torchmetrics imports both"
    assert lean["imported"] == {name: False for name in LEFT_OUT}
    assert lean["afterwards"] == "4.46.0", "hidden from torchmetrics' import only: a user's model imports it after"
    assert lean["accuracy"] == plain["accuracy"] == pytest.approx(2 / 3), "torchmetrics' metrics compute as before"


@pytest.mark.e2e
def test_a_plain_runs_processes_import_no_tracker(tmp_path):
    """Every module the launch, its supervisor and the rank imported (Python's -X importtime, inherited by each),
    in a run that trains cold with the default trackers (metrics.csv only)."""
    run = Run(
        tmp_path,
        {
            "data": {"num_train_files": 1, "num_records_per_train_file": 64, "num_val_records": 32, "num_features": 4},
            "trainer": {"max_epochs": 1, "batch_size": 16},
        },
    )
    run.env = {"PYTHONPROFILEIMPORTTIME": "1", WARM_START: "0"}
    assert run.train() == 0, run.log.read_text()[-3000:]
    text = run.log.read_text()
    imported = {match[1].partition(".")[0] for match in re.finditer(r"^import time:.*\|\s+([\w.]+)\s*$", text, re.M)}
    assert {"torch", "lightning", "snakeddp"} <= imported, "the probe sees the rank's imports"
    assert imported.isdisjoint(TRACKERS), sorted(imported & set(TRACKERS))
    # snakeddp.train imports torchmetrics lean before Lightning does (training.lean_torchmetrics).
    assert imported.isdisjoint(LEFT_OUT), sorted(imported & set(LEFT_OUT))
