"""A higher trainer.max_epochs continues every finished run, and equals training to it from scratch.

One sweep (2 learning rates x 2 seeds) trained for 3 epochs, then for 5 (``--config``), then for 3
again; beside it the same sweep trained for 5 epochs in an empty directory.
"""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch

from tests.helpers import TINY, Workflow, merged

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kept_warm")]

# Early stopping must not end these runs: what is compared is every epoch of the budget.
SWEEP = merged(
    TINY, {"trainer": {"early_stopping": {"patience": 20}}, "sweep": {"model.lr": [0.003, 0.01], "seed": [1, 2]}}
)
RUNS = ("lr-0.003_seed-1", "lr-0.003_seed-2", "lr-0.01_seed-1", "lr-0.01_seed-2")
FIVE = ("--config", "trainer={max_epochs: 5}")
# The runs' records as targets: the report (another engineer's, and seconds per workflow) is not what is tested.
TRAINED = tuple(f"results/runs/{run}/provenance.json" for run in RUNS)
# Columns of metrics.csv that measure the wall clock (everything else must match value for value).
CLOCK = {"train_seconds", "epoch_seconds", "samples_per_s", "data_wait_s", "finished_at"}


def outcome(flow, run):
    """(provenance.json, metrics.csv without its clock columns, last.ckpt's weights, the train log) of a run."""
    run_dir = flow.directory / "results" / "runs" / run
    with (run_dir / "metrics.csv").open() as handle:
        rows = [{k: v for k, v in row.items() if k not in CLOCK} for row in csv.DictReader(handle)]
    weights = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    log = (flow.directory / "logs" / "train" / f"{run}.log").read_text()
    return json.loads((run_dir / "provenance.json").read_text()), rows, weights, log


@pytest.fixture(scope="module")
def budgets(tmp_path_factory):
    """The sweep's outcome at 3 epochs, at 5 continued, and at 3 again; the workflow and its last output."""
    flow = Workflow(tmp_path_factory.mktemp("budget"))
    flow.write_config(SWEEP)
    flow.run(*TRAINED)
    three = {run: outcome(flow, run) for run in RUNS}
    flow.run(*TRAINED, *FIVE)
    five = {run: outcome(flow, run) for run in RUNS}
    again = flow.run(*TRAINED)
    back = {run: outcome(flow, run) for run in RUNS}
    return flow, three, five, back, again.stdout + again.stderr


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """The same sweep trained for 5 epochs in an empty directory."""
    flow = Workflow(tmp_path_factory.mktemp("scratch"))
    flow.write_config(SWEEP)
    flow.run(*TRAINED, *FIVE)
    return {run: outcome(flow, run) for run in RUNS}


def test_every_run_resumes_at_epoch_4_and_equals_training_to_5_epochs_from_scratch(budgets, scratch):
    _, three, five, _, _ = budgets
    for run in RUNS:
        first, (record, rows, weights, log) = three[run][0], five[run]
        earlier = first["attempt"]["id"]
        assert f"{run}: continuing attempt {earlier} (epochs 1-3) from epoch 4/5" in log, log[-2000:]
        assert f"{run}: training from epoch 4/5" in log and f"{run}: epoch 1/5" not in log, "epochs 1-3 not retrained"
        assert [int(row["epoch"]) for row in rows] == [0, 1, 2, 3, 4]
        assert rows == scratch[run][1], f"{run}: metrics.csv differs from a 5-epoch run from scratch"
        assert weights.keys() == scratch[run][2].keys()
        assert all(torch.equal(weights[name], scratch[run][2][name]) for name in weights), f"{run}: weights differ"
        assert rows[:3] == three[run][1], "the first three epochs are the 3-epoch attempt's"
        assert record["training"]["epochs_from"] == [
            {"attempt": earlier, "first_epoch": 1, "last_epoch": 3},
            {"attempt": record["attempt"]["id"], "first_epoch": 4, "last_epoch": 5},
        ]
        assert record["training"]["best_epoch"] == scratch[run][0]["training"]["best_epoch"]
        assert record["training"]["best_score"] == scratch[run][0]["training"]["best_score"]
        names = {c["path"] for c in record["training"]["checkpoints"]}
        assert names == {c["path"] for c in scratch[run][0]["training"]["checkpoints"]}, "the same top-k"


def test_coming_back_to_3_epochs_restores_without_training(budgets):
    flow, three, five, back, output = budgets
    for run in RUNS:
        record, rows, weights, log = back[run]
        first = three[run][0]
        assert all(torch.equal(weights[name], three[run][2][name]) for name in weights)
        assert f"attempt {first['attempt']['id']} already finished" in log and "restored it, nothing trained" in log
        assert "training from epoch" not in log, log[-2000:]
        assert record["attempt"]["id"] == first["attempt"]["id"] and record["attempt"]["restored"] is True
        assert record["training"] == first["training"] and rows == three[run][1]
        kept = flow.directory / "results/runs" / run / "attempts" / five[run][0]["attempt"]["id"]
        assert (kept / "checkpoints" / "last.ckpt").is_file(), "the 5-epoch attempt is kept in its turn"
    assert output.count("restored it, nothing trained") == len(RUNS), "the terminal says so for each run"


def test_a_damaged_finished_record_stops_with_one_line_and_its_hint_gets_the_run_back(budgets):
    flow, three, _, _, _ = budgets
    run = RUNS[0]
    run_dir = flow.directory / "results" / "runs" / run
    finished = run_dir / "finished.json"
    finished.write_text('{"run_id": "hand-edited"}')
    target = f"results/runs/{run}/provenance.json"
    done = flow.run("--forcerun", target, *TRAINED, check=False)
    assert done.returncode != 0
    log = (flow.directory / "logs" / "train" / f"{run}.log").read_text()
    (line,) = [line for line in log.splitlines() if "HINT:" in line]
    assert "does not match the provenance schema" in line, line
    assert f"(mv results/runs/{run}/finished.json results/runs/{run}/finished.json.bad)" in line
    assert f"rerun its train job (snakemake --profile local --forcerun {target}, with your --configfile" in line
    shutil.move(finished, f"{finished}.bad")  # what the HINT says
    flow.run("--forcerun", target, *TRAINED)
    record, rows, _, log = outcome(flow, run)
    assert rows == three[run][1] and record["training"]["epochs_completed"] == 3
    assert f"{run}: epoch " not in log, "it resumed from last.ckpt and trained nothing"
    assert record["training"]["best_score"] == three[run][0]["training"]["best_score"]
