"""snakeddp export and snakeddp.load: real runs trained by the launcher, exported by the CLI, loaded in a
process where anything that unpickles raises; predictions on the validation set compared bit for bit."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from snakeddp.data.partitions import read_partition
from snakeddp.run.runs import resolve_run
from snakeddp.training.export import DESCRIPTION, WEIGHTS, read_description
from snakeddp.training.models import build_model
from snakeddp.training.safe_load import read_checkpoint
from snakeddp.util.fsutil import read_json
from snakeddp.util.hashing import sha256_file
from tests.helpers import SRC, launch, make_run, subprocess_env, tiny_with

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kept_warm")]

# A user's LightningModule that does not call save_hyperparameters(): export must rebuild its
# arguments from model.kwargs and the data's task alone (TINY's data is binary: num_classes 1).
USER_MODULE = """
import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn


class Net(pl.LightningModule):
    def __init__(self, num_features: int, num_classes: int, hidden: int = 4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(num_features, hidden), nn.Tanh(), nn.Linear(hidden, num_classes))
        self.register_buffer("scale", torch.tensor(1.0))

    def forward(self, x):
        return self.body(x) * self.scale

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.binary_cross_entropy_with_logits(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.binary_cross_entropy_with_logits(self(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)
"""

RUNS = {
    "builtin": {},
    "user": {"model": {"target": "usernet:Net", "kwargs": {"hidden": 6}}},
    "top0": {"trainer": {"save_top_k": 0}},
}

# Run in a fresh interpreter: load the export with every way of unpickling made to raise, and record
# each file opened under the results directory, then write the validation predictions as safetensors.
LOAD_AND_PREDICT = """
import os, pickle, sys
import torch
import torch.serialization

results, export, val, out = sys.argv[1:5]
opened = []

def audit(event, args):
    if event == "pickle.find_class":
        raise AssertionError(f"unpickling on the load path: {args}")
    if event == "open" and isinstance(args[0], str) and os.path.abspath(args[0]).startswith(results):
        opened.append(os.path.abspath(args[0]))

def refuse(*args, **kwargs):
    raise AssertionError("pickle or torch.load called on the load path")

class RefusedUnpickler(pickle.Unpickler):  # still subclassable, as Lightning's lazy loader does
    def __init__(self, *args, **kwargs):
        refuse()

for owner, name in ((pickle, "load"), (pickle, "loads"), (torch, "load"), (torch.serialization, "load")):
    setattr(owner, name, refuse)
pickle.Unpickler = RefusedUnpickler
sys.addaudithook(audit)

import snakeddp
from safetensors.torch import save_file
from snakeddp.data.partitions import read_partition

features = torch.as_tensor(read_partition(val).features)
model = snakeddp.load(export)
assert not model.training
with torch.no_grad():
    save_file({"predictions": model(features).contiguous()}, out)
print(type(model).__module__ + ":" + type(model).__qualname__)
print("\\n".join(opened))
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A workflow directory with three finished runs under results/runs (see RUNS)."""
    root = tmp_path_factory.mktemp("workflow")
    (root / "usernet.py").write_text(textwrap.dedent(USER_MODULE))
    for run_id, overrides in RUNS.items():
        run_yaml, manifest = make_run(root, tiny_with(overrides), run_id)
        # As the train rule runs it (the workflows' venv, their jobs' import path): the file's kept warm process
        # (kept_warm) takes the launch, which it would decline in this interpreter (each run would start cold).
        done = launch(run_yaml, manifest, root / "results" / "runs" / run_id, cwd=root, kept_warm=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root


def snakeddp_cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakeddp.cli", *args], cwd=cwd, env=subprocess_env(**env),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def reference_predictions(root: Path, run_id: str, features: torch.Tensor) -> torch.Tensor:
    """The best checkpoint's model as training built it, its weights read straight from the checkpoint."""
    run = resolve_run(run_id, root / "results")
    checkpoint = read_checkpoint(run.file(run.provenance["training"]["best_checkpoint"]))
    task = read_json(run.manifest_path)["task"]
    model = build_model(run.provenance["config"]["model"], task)
    model.load_state_dict(checkpoint["state_dict"])
    with torch.no_grad():
        return model.eval()(features)


def load_in_fresh_process(root: Path, export: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    manifest = read_json(resolve_run("builtin", root / "results").manifest_path)
    val = root / "results" / "data" / manifest["dataset"] / manifest["val"]["file"]
    argv = [sys.executable, "-c", LOAD_AND_PREDICT, str(root / "results"), str(export), str(val)]
    return subprocess.run(
        [*argv, str(tmp_path / "predictions.safetensors")], cwd=tmp_path, env=subprocess_env(**env),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def val_features(root: Path) -> torch.Tensor:
    run = resolve_run("builtin", root / "results")
    manifest = read_json(run.manifest_path)
    return torch.as_tensor(read_partition(run.manifest_path.parent / manifest["val"]["file"]).features)


@pytest.mark.parametrize(("run_id", "target"), [("builtin", "snakeddp.training.models:MLP"), ("user", "usernet:Net")])
def test_export_then_load_predicts_exactly_as_the_best_checkpoint(trained, tmp_path, monkeypatch, run_id, target):
    monkeypatch.syspath_prepend(str(trained))  # the reference model below imports the user's module
    # Not run from the workflow directory: export finds the user's module where training did.
    done = snakeddp_cli("--results", str(trained / "results"), "export", run_id, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    export = trained / "results" / "export" / run_id
    assert sorted(p.name for p in export.iterdir()) == [DESCRIPTION, WEIGHTS]

    description = read_json(export / DESCRIPTION)
    run = resolve_run(run_id, trained / "results")
    best = run.provenance["training"]["best_checkpoint"]
    # Its value as the terminal shows metrics (it said 0.37117987871170044): model.json keeps it whole.
    said = f"{run_id}: exported the best checkpoint (val_loss {best['score']:.4g}) to {export}"
    assert said in done.stdout, done.stdout
    assert description["model"]["target"] == target
    assert description["monitor"] == {"metric": "val_loss", "mode": "min", "best": best["score"]}
    assert description["run"]["provenance_sha256"] == sha256_file(run.run_dir / "provenance.json")
    assert description["run"]["checkpoint"]["sha256"] == best["sha256"]
    # Counted as the file name (epoch003-...) and the report's best epoch count: from 1.
    counted = int(re.match(r"epoch(\d+)", Path(best["path"]).name).group(1))
    assert description["run"]["checkpoint"]["epoch"] == counted == run.provenance["training"]["best_epoch"] + 1
    assert description["format"] == "snakeddp-export/2"
    assert description["weights"]["sha256"] == sha256_file(export / WEIGHTS)
    expected_kwargs = {"num_features": 8, "num_classes": 1, "hidden": 6} if run_id == "user" else None
    if expected_kwargs:
        assert description["model"]["kwargs"] == expected_kwargs
    else:
        assert description["model"]["kwargs"]["hidden_sizes"] == [16]

    # The user's module is found as a user would make it findable (PYTHONPATH), not from the run.
    loaded = load_in_fresh_process(trained, export, tmp_path, PYTHONPATH=f"{trained}:{SRC}")
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    loaded_target, *opened = loaded.stdout.split("\n")
    assert loaded_target == target
    # Only the export and the validation data: nothing of the run (its checkpoints) is read.
    assert {Path(p).name for p in opened if p} <= {DESCRIPTION, WEIGHTS, "val.safetensors"}
    assert DESCRIPTION in {Path(p).name for p in opened} and not any("/runs/" in p for p in opened)

    features = val_features(trained)
    predictions = load_file(tmp_path / "predictions.safetensors")["predictions"]
    expected = reference_predictions(trained, run_id, features)
    assert predictions.shape == (len(features), expected.shape[1])
    assert torch.equal(predictions, expected)


def test_a_model_whose_class_cannot_be_imported_says_how_to_make_it_importable(trained, tmp_path):
    export = tmp_path / "user-export"
    done = snakeddp_cli("--results", str(trained / "results"), "export", "user", "--to", str(export), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    failed = load_in_fresh_process(trained, export, tmp_path)
    message = failed.stderr.strip().splitlines()[-1]
    assert "ExportError" in message and "the model's class usernet:Net cannot be imported here" in message
    assert "ModuleNotFoundError" in message and "add the directory that holds its module to PYTHONPATH" in message
    # As the HINT says.
    loaded = load_in_fresh_process(trained, export, tmp_path, PYTHONPATH=f"{trained}:{SRC}")
    assert loaded.returncode == 0, loaded.stderr[-3000:]


def test_unknown_run_is_one_line_naming_the_finished_ones(trained, tmp_path):
    failed = snakeddp_cli("--results", str(trained / "results"), "export", "nosuchrun", cwd=tmp_path)
    assert failed.returncode == 2 and failed.stdout == ""
    (line,) = failed.stderr.strip().splitlines()
    assert line.startswith("snakeddp export: 'nosuchrun' is not a run id") and "HINT" in line
    assert "builtin, top0, user" in line


def test_a_run_without_a_best_checkpoint_says_how_to_keep_one(trained, tmp_path):
    assert read_json(trained / "results" / "runs" / "top0" / "provenance.json")["training"]["best_checkpoint"] is None
    failed = snakeddp_cli("--results", str(trained / "results"), "export", "top0", cwd=tmp_path)
    assert failed.returncode == 2
    (line,) = failed.stderr.strip().splitlines()
    assert "run top0 has no best checkpoint to export" in line and "HINT: set trainer.save_top_k: 1 or more" in line
    assert not (trained / "results" / "export" / "top0").exists()
    # The same config with save_top_k at its default (2) is the builtin run, which exports.
    builtin, top0 = (
        read_json(trained / "results" / "runs" / r / "provenance.json")["config"] for r in RUNS if r != "user"
    )
    assert builtin["trainer"]["save_top_k"] == 2 and builtin["model"] == top0["model"]


def test_a_removed_or_changed_best_checkpoint_is_refused(trained, tmp_path):
    copy = tmp_path / "results" / "runs" / "builtin"
    shutil.copytree(trained / "results" / "runs" / "builtin", copy)
    best = copy / read_json(copy / "provenance.json")["training"]["best_checkpoint"]["path"]
    best.write_bytes(best.read_bytes() + b"\0")
    failed = snakeddp_cli("export", str(copy), "--to", str(tmp_path / "out"), cwd=tmp_path)
    (line,) = failed.stderr.strip().splitlines()
    assert f"its best checkpoint {best} is changed since the run recorded it" in line and "snakeddp verify" in line
    best.unlink()
    failed = snakeddp_cli("export", str(copy), "--to", str(tmp_path / "out"), cwd=tmp_path)
    (line,) = failed.stderr.strip().splitlines()
    assert f"its best checkpoint {best} is gone" in line and "HINT: " in line
    assert not (tmp_path / "out").exists()


def test_changed_model_code_is_refused_with_the_weights_it_does_not_fit(trained, tmp_path):
    module = trained / "usernet.py"
    original = module.read_text()
    try:
        module.write_text(textwrap.dedent(USER_MODULE).replace("nn.Tanh(), ", ""))
        failed = snakeddp_cli("--results", str(trained / "results"), "export", "user", "--to", "out", cwd=tmp_path)
        (line,) = failed.stderr.strip().splitlines()
        assert "the weights in" in line and "do not fit usernet:Net(hidden=6, num_features=8, num_classes=1)" in line
        assert "HINT: export with the model code the run trained with" in line
    finally:
        module.write_text(original)
    # As the HINT says: the module as it was.
    done = snakeddp_cli("--results", str(trained / "results"), "export", "user", "--to", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_a_directory_without_an_export_says_how_to_write_one(tmp_path):
    failed = subprocess.run(
        [sys.executable, "-c", f"import snakeddp; snakeddp.load({str(tmp_path)!r})"],
        env=subprocess_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    message = failed.stderr.strip().splitlines()[-1]
    assert f"{tmp_path} holds no exported model (no model.json). HINT: write one with `snakeddp export RUN" in message


def test_a_model_json_of_the_first_format_reads_with_its_epoch_counted_from_1(tmp_path):
    """snakeddp-export/1 held Lightning's epoch index (from 0) beside a file name that counts from 1; read, it is
    counted as /2 counts it, the rest as written."""
    written = {
        "format": "snakeddp-export/1",
        "model": {"target": "snakeddp.training.models:MLP", "kwargs": {"num_features": 8}},
        "monitor": {"metric": "val_loss", "mode": "min", "best": 0.42},
        "run": {
            "run_id": "base",
            "attempt": "a" * 12,
            "provenance_sha256": "b" * 64,
            "checkpoint": {"path": "checkpoints/epoch003-val_loss0.4200.ckpt", "sha256": "c" * 64, "epoch": 2},
        },
        "weights": {"file": WEIGHTS, "sha256": "d" * 64},
    }
    (tmp_path / DESCRIPTION).write_text(json.dumps(written))
    read = read_description(tmp_path)
    assert read["format"] == "snakeddp-export/2" and read["run"]["checkpoint"]["epoch"] == 3
    assert {
        **read,
        "format": written["format"],
        "run": {**read["run"], "checkpoint": written["run"]["checkpoint"]},
    } == (written), "nothing else changes"
    current = {**written, "format": "snakeddp-export/2"}
    (tmp_path / DESCRIPTION).write_text(json.dumps(current))
    assert read_description(tmp_path) == current, "a /2 record is read as written"


def test_importing_snakeddp_imports_no_torch():
    probe = "import sys, snakeddp; print('torch' in sys.modules, callable(snakeddp.load), 'torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=subprocess_env(), capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "True", "True"]
