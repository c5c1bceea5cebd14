"""A user's own model and DataModule, trained and reported through `snakemake --profile profiles/local`:
Lightning's BoringModel and BoringDataModule (one configuration that refuses in one line, one that
reports), and a small CNN on random images with its own DataModule at 1 and 2 processes. Every report
shows what the runs logged and counted, with no panel for a metric nobody logged."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from snakeddp.report import figures
from snakeddp.report.table import varying_params
from snakeddp.run import attempt as runstate
from snakeddp.run.runs import find_runs
from tests.chromium import chromium, console_errors
from tests.helpers import Workflow, subprocess_env

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kept_warm")]

BORING = "lightning.pytorch.demos.boring_classes"
LAUNCH = {"mem_mb": 1000, "runtime": 10}


def boring(model: str, **trainer) -> dict:
    return {
        "data": {"name": "boring", "source": "module", "module": f"{BORING}:BoringDataModule"},
        "model": {"target": model},
        "trainer": {"max_epochs": 2, **trainer},
        "launch": {**LAUNCH, "devices": 2},
    }


def user_workflow(directory: Path, config: dict) -> Workflow:
    """A working directory holding the user's module, as a user's project would."""
    shutil.copy(Path(__file__).with_name("user_project.py"), directory / "user_project.py")
    flow = Workflow(directory)
    flow.write_config(config)
    return flow


def verify(flow: Workflow, run: str) -> str:
    done = subprocess.run(
        [flow.bin / "snakeddp", "--results", str(flow.directory / "results"), "verify", run],
        capture_output=True, text=True, env=subprocess_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def report_of(flow: Workflow) -> tuple[str, list[dict], dict]:
    """report.html, runs.csv's rows and the curves figure's series, after checking that the figure has
    no empty panel: every metric it plots has a finite value in some run."""
    report = flow.directory / "results" / "report"
    html = (report / "report.html").read_text()
    with (report / "runs.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    series = json.loads((report / "plots" / "curves.json").read_text())["series"]
    plotted: dict[str, list[float]] = {}
    for item in series:
        kind, *_, metric = item["gid"].split("|")
        if kind == "curve":
            plotted.setdefault(metric, []).extend(y for y in item["y"] if y is not None and math.isfinite(y))
    assert plotted and all(plotted.values()), plotted
    assert (report / "ro-crate-metadata.json").is_file()
    rendered(report / "report.html")
    return html, rows, plotted


def rendered(page: Path) -> None:
    """The page as Chromium renders it (report.png beside it, for a person to look at): offline,
    with no console error or blocked load, and with its embedded figures."""
    shot = page.with_suffix(".png")
    with tempfile.TemporaryDirectory() as profile:
        done = chromium(page, Path(profile), "--window-size=1300,2600", f"--screenshot={shot}")
    assert not console_errors(done.stderr), done.stderr[-3000:]
    assert shot.is_file() and shot.stat().st_size > 50_000, "a page with its figures, not a blank one"


def test_boringmodel_that_logs_no_val_loss_stops_every_rank_in_one_line_naming_what_it_logged(tmp_path):
    """Both ranks stop at the end of the first epoch: the train job ends with no rank left (none still
    holds the run directory's attempt lock, which every training process holds for its lifetime), and
    its log and the terminal carry the one line, no traceback."""
    flow = user_workflow(tmp_path, boring(f"{BORING}:BoringModel"))
    done = flow.run(check=False)
    terminal = done.stdout + done.stderr
    assert done.returncode != 0
    run_dir = tmp_path / "results" / "runs" / "base"
    runstate.ensure_no_live_attempt(run_dir)  # raises while any rank of the run is still there
    log = (tmp_path / "logs" / "train" / "base.log").read_text()
    assert "snakeddp.cluster.supervisor --nproc-per-node=2 " in log, "two ranks started"
    lines = [line for line in log.splitlines() if "trainer.monitor.metric='val_loss'" in line]
    assert len(lines) == 1, log[-3000:]
    (line,) = lines
    assert "BoringModel did not log it by the end of epoch 1 " in line, "epochs counted as the terminal counts them"
    assert "it logged: nothing" in line and "HINT:" in line, line
    assert "Traceback" not in log, log[-3000:]
    assert "Traceback" not in terminal and line in terminal, terminal[-3000:]
    assert (run_dir / "failure.txt").read_text().strip() == line
    assert not (run_dir / "provenance.json").exists()


def test_boringmodel_monitored_by_the_metric_it_logs_trains_and_reports_what_it_logged(tmp_path):
    config = boring("user_project:LoggedBoringModel", monitor={"metric": "valid_mse", "mode": "min"})
    flow = user_workflow(tmp_path, config)
    flow.run()
    (run,) = find_runs(tmp_path / "results")
    training, data = run.provenance["training"], run.provenance["data"]
    assert run.logged == ["train_mse", "valid_mse"]
    assert training["monitor"] == {"metric": "valid_mse", "mode": "min"}
    assert training["best_checkpoint"]["metric"] == "valid_mse"
    scores = {row["epoch"]: row["valid_mse"] for row in run.metrics}
    assert training["best_score"] == min(scores.values()) and scores[training["best_epoch"]] == training["best_score"]
    assert training["best_val_loss"] is None and training["best_val_acc"] is None
    # BoringDataModule: 64 train and 64 validation samples, batches of one, shared by 2 ranks.
    assert data["records"] is None and data["partitions"] is None
    assert data["counted"] == {"train_samples_per_epoch": 64, "train_batches_per_epoch": 64, "val_samples": 64,
                               "val_batches": 64}  # fmt: skip

    html, rows, plotted = report_of(flow)
    assert set(plotted) == {"train_mse", "valid_mse"}, "panels only for what the model logged"
    assert "val_acc" not in html and "validation accuracy" not in html
    assert "does not apply: the DataModule lightning.pytorch.demos.boring_classes:BoringDataModule" in html
    assert "64 train samples in 64 batches per epoch" in html
    assert "best valid_mse" in html
    # The user's classes, where the run's record has them: the file and its sha256 (the commit does not say them
    # where the module is not committed).
    for user in run.provenance["user_code"]:
        assert f"<dt>{user['role']}</dt><dd>{user['target']}: {user['file']}, sha256 " in html, user
    # Its config as it applies: no built-in model's settings, no generator's (the record keeps them, at defaults).
    shown = html[html.index("<h3>Config") :]
    assert "hidden_sizes" not in shown[: shown.index("</pre>")] and "num_features" not in shown[: shown.index("</pre>")]
    (row,) = rows
    assert row["monitor"] == "valid_mse (min)" and float(row["best_score"]) == training["best_score"]
    assert float(row["at_best:valid_mse"]) == training["best_score"] and "at_best:val_loss" not in row
    assert (row["samples_per_epoch"], row["batches_per_epoch"], row["val_samples"]) == ("64", "64", "64")
    assert "user code" in verify(flow, "base")


def test_a_cnn_on_its_own_image_datamodule_at_1_and_2_processes_reports_its_own_metrics_and_batches(tmp_path):
    config = {
        "data": {"name": "fakeimages", "source": "module", "module": "user_project:FakeImages",
                 "module_kwargs": {"images_per_batch": 16}},
        "model": {"target": "user_project:SmallCNN", "kwargs": {"channels": 8}},
        "trainer": {"max_epochs": 3},
        "launch": LAUNCH,
        "sweep": {"launch.devices": [1, 2]},
    }  # fmt: skip
    flow = user_workflow(tmp_path, config)
    flow.run()
    runs = find_runs(tmp_path / "results")
    assert [run.run_id for run in runs] == ["devices-1", "devices-2"]
    for run in runs:
        assert run.logged == ["train_loss", "val_loss", "val_accuracy"]
        # 192 images in batches of 16 (not trainer.batch_size's 128): 12 batches, over all ranks.
        assert run.provenance["data"]["counted"]["train_samples_per_epoch"] == 192
        assert run.provenance["data"]["counted"]["train_batches_per_epoch"] == 12
        assert run.provenance["training"]["best_val_loss"] is not None
        assert run.provenance["training"]["best_metrics"]["val_accuracy"] is not None
        verify(flow, run.run_id)
    points = figures.scaling_points(runs, varying_params([run.provenance for run in runs]))
    assert [(point["run"], point["world_size"]) for point in points] == [("devices-1", 1), ("devices-2", 2)]
    for point in points:
        assert point["step_ms"] == pytest.approx(1e3 * 16 * point["world_size"] / point["throughput"])

    html, rows, plotted = report_of(flow)
    assert set(plotted) == {"train_loss", "val_loss", "val_accuracy"}
    assert "val_acc," not in html and "validation accuracy" not in html, "no panel for the built-in's val_acc"
    assert "best val_loss" in html and "val_accuracy" in html
    assert [row["at_best:val_accuracy"] != "" for row in rows] == [True, True]
    assert (tmp_path / "results" / "report" / "plots" / "scaling.json").is_file()


def test_binary_labels_shaped_n_from_a_users_datamodule_train_the_builtin_model_and_report(tmp_path):
    config = {
        "data": {"name": "points", "source": "module", "module": "user_project:BinaryPoints"},
        "model": {"name": "linear", "lr": 0.05},
        "trainer": {"max_epochs": 3, "batch_size": 32},
        "launch": LAUNCH,
    }
    flow = user_workflow(tmp_path, config)
    flow.run()
    (run,) = find_runs(tmp_path / "results")
    assert run.logged == ["train_loss", "val_loss", "val_acc"]
    assert run.provenance["training"]["best_val_acc"] > 0.75, "the plane is learnable"
    assert run.provenance["data"]["counted"]["train_batches_per_epoch"] == 8
    html, _, plotted = report_of(flow)
    assert set(plotted) == {"train_loss", "val_loss", "val_acc"}
    assert "does not apply: the DataModule user_project:BinaryPoints" in html
    verify(flow, "base")


def test_a_token_in_model_kwargs_is_refused_in_one_line_and_through_the_environment_it_trains_unrecorded(tmp_path):
    token = "reg-7f3a91c2e5"
    config = {
        "data": {"name": "fakeimages", "source": "module", "module": "user_project:FakeImages"},
        "model": {"target": "user_project:RegistryCNN", "kwargs": {"channels": 8, "registry_token": token}},
        "trainer": {"max_epochs": 1},
        "launch": {**LAUNCH, "devices": 1},
    }
    flow = user_workflow(tmp_path, config)
    refused = flow.run(check=False)
    terminal = refused.stdout + refused.stderr
    lines = [line for line in terminal.splitlines() if "HINT:" in line]
    assert refused.returncode != 0 and len(lines) == 1, terminal[-3000:]
    assert "model.kwargs.registry_token looks like a secret" in lines[0]
    assert 'export REGISTRY_TOKEN=...) and read it in your code as os.environ["REGISTRY_TOKEN"]' in lines[0]
    assert "Traceback" not in terminal and not (tmp_path / "results").exists()
    # What the HINT says: out of the config, exported where snakemake runs, read by the model from there.
    del config["model"]["kwargs"]["registry_token"]
    flow.write_config(config)
    done = flow.run(env=subprocess_env(REGISTRY_TOKEN=token))
    (run,) = find_runs(tmp_path / "results")
    assert run.provenance["training"]["epochs_completed"] == 1
    kept = [str(path) for top in ("results", "logs", ".snakemake") for path in (tmp_path / top).rglob("*")
            if path.is_file() and token.encode() in path.read_bytes()]  # fmt: skip
    assert not kept and token not in done.stdout + done.stderr
