"""Successive halving on the local profile, as a user runs it: 9 learning rates, max_epochs 9, eta 3.

One search is run in full (fixture ``searched``); a second, from an empty directory, is stopped with
Ctrl-C in its second rung and run again; the first then trains the whole grid, continuing the
configurations the search stopped.
"""

import copy
import csv
import json
import re
import signal
import subprocess
import time
from collections import Counter

import pytest
import torch

from bench.benchmarks import search as bench_search
from snakeddp.run.layout import RunPaths
from tests import workflow_venv
from tests.helpers import TINY, Workflow, as_typed_in_a_terminal, subprocess_env

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kept_warm")]

LRS = [0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 0.0003, 0.0001, 0.00003]
SEARCH = {
    **copy.deepcopy(TINY),
    # Enough samples per epoch that one epoch ranks the learning rates as nine do (TINY's 300 do not:
    # lr 0.01 is 4th after one epoch there, and best, by 0.0008, after nine).
    "data": {**TINY["data"], "num_records_per_train_file": 1000, "num_val_records": 400},
    "trainer": {**TINY["trainer"], "max_epochs": 9, "early_stopping": {"enabled": False}},
    "sweep": {"model.lr": LRS},
    "search": {"method": "successive_halving", "eta": 3, "min_epochs": 1},
}
# The terminal's line for each epoch a process trained (training/progress.py).
EPOCH_LINE = re.compile(r"^(\S+): epoch (\d+)/(\d+) ", re.MULTILINE)


def epochs_trained(flow):
    """Every epoch any train job trained, read from the jobs' logs: (run, epoch, budget) triples."""
    logs = sorted((flow.directory / "logs").glob("search/*.log")) + sorted(
        (flow.directory / "logs").glob("train/*.log")
    )
    return [(run, int(e), int(m)) for log in logs for run, e, m in EPOCH_LINE.findall(log.read_text())]


def search_table(flow):
    with (flow.directory / "results/report/search.csv").open() as handle:
        return list(csv.DictReader(handle))


def winner(flow):
    return next(row["configuration"] for row in search_table(flow) if row["winner"] == "True")


def weights(flow, run):
    checkpoint = RunPaths.under(flow.directory / "results", run).last_checkpoint
    return torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    flow = Workflow(tmp_path_factory.mktemp("search"))
    flow.write_config(SEARCH)
    flow.first = flow.run()
    flow.epochs = epochs_trained(flow)
    flow.first_rung0 = (flow.directory / "results/search/rung-0.json").read_text()
    return flow


def test_the_search_trains_a_third_of_the_grid_and_a_rerun_is_nothing_to_do(searched):
    epochs = searched.epochs
    # 9 configurations to epoch 1, 3 of them on to 3, 1 on to 9; no epoch trained twice.
    assert len(epochs) == 9 * 1 + 3 * 2 + 1 * 6 <= 33 < 81, epochs
    assert len({(run, epoch) for run, epoch, _ in epochs}) == len(epochs), "an epoch was trained twice"
    rows = search_table(searched)
    assert [int(row["last_rung"]) for row in rows] == [2] + [1] * 2 + [0] * 6
    page = (searched.directory / "results/report/report.html").read_text()
    assert 'id="search-epochs">21</strong> of the whole grid\'s 81' in page
    # The winner's epochs came from three attempts, one per rung; provenance and the page say which.
    record = json.loads((searched.directory / "results/runs" / winner(searched) / "provenance.json").read_text())
    spans = [(span["first_epoch"], span["last_epoch"]) for span in record["training"]["epochs_from"]]
    assert spans == [(1, 1), (2, 3), (4, 9)], spans
    assert re.search(r"1–1: attempt <code>[0-9a-f]{12}</code>; 2–3: attempt .*; 4–9: attempt", page)
    assert "Nothing to be done" in searched.run().stderr
    # bench 9 reads a search's directory the same way (run by `python -m bench search`, not here).
    assert bench_search.epochs_trained(searched.directory) == len(epochs)
    assert bench_search.best_configuration(searched.directory) == winner(searched)
    assert bench_search.fit_seconds(searched.directory) > 0
    listed = subprocess.run(
        [workflow_venv.snakeddp(), "runs", "--configfile", "config.yaml"],
        cwd=searched.directory,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    stopped = re.search(r"^stopped by the search: (.*)$", listed, re.MULTILINE).group(1).split("), ")
    assert len(stopped) == 8 and "not finished yet" not in listed, listed
    assert sum("(rung 1, 3 epochs" in entry for entry in stopped) == 2, stopped


def test_listing_the_values_in_another_order_changes_nothing(searched):
    reordered = copy.deepcopy(SEARCH)
    reordered["sweep"]["model.lr"] = LRS[::-1]
    searched.write_config(reordered)
    try:
        # No run is trained and no rung decided again; the report reruns, as it records the config as written.
        assert set(searched.planned_jobs()) <= {"report", "all"}
    finally:
        searched.write_config(SEARCH)


def test_an_interrupted_search_from_an_empty_directory_makes_the_same_decisions(searched, tmp_path):
    again = Workflow(tmp_path)
    again.write_config(SEARCH)
    started = subprocess.Popen(
        again.command(), cwd=again.directory, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=as_typed_in_a_terminal,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not list((again.directory / "logs/search").glob("*.epochs-3.log")) and time.monotonic() < deadline:
        assert started.poll() is None, "the search ended before its second rung started"
        time.sleep(0.1)
    started.send_signal(signal.SIGINT)  # Ctrl-C in the second rung
    assert started.wait(timeout=120) != 0
    assert not (again.directory / "results/search/rung-1.json").exists(), "stopped before rung 1 was decided"
    again.run()
    for rung in range(3):
        name = f"results/search/rung-{rung}.json"
        assert (again.directory / name).read_text() == (searched.directory / name).read_text(), name
    best = winner(searched)
    assert winner(again) == best
    for name, tensor in weights(searched, best).items():
        assert torch.equal(tensor, weights(again, best)[name]), name


def test_the_whole_grid_continues_the_stopped_configurations_and_agrees_on_the_best(searched):
    chosen = winner(searched)
    grid = copy.deepcopy(SEARCH)
    del grid["search"]
    searched.write_config(grid)
    searched.run()
    # The grid's report has no search: the search's table, an earlier report's, is gone from results/report/.
    assert not (searched.directory / "results/report/search.csv").exists()
    new = list((Counter(epochs_trained(searched)) - Counter(searched.epochs)).elements())
    # The 8 stopped configurations continue from their last rung (6 from epoch 2, 2 from epoch 4).
    assert sorted(e for _, e, _ in new) == sorted([e for e in range(2, 10)] * 6 + [e for e in range(4, 10)] * 2), new
    records = [json.loads(path.read_text()) for path in (searched.directory / "results/runs").glob("*/provenance.json")]
    assert sorted(r["training"]["epochs_completed"] for r in records) == [9] * 9
    best_of_grid = min(records, key=lambda record: record["training"]["best_score"])["run_id"]
    assert best_of_grid == chosen


def test_a_search_edited_after_the_grid_scores_its_rungs_on_epochs_already_trained(searched):
    """After the whole grid (the test above), eta 2 asks for rungs of 1, 2, 4, 8 and 9 epochs: every
    run already trained past them, so each rung is scored on those epochs and nothing trains."""
    edited = copy.deepcopy(SEARCH)
    edited["search"]["eta"] = 2
    searched.write_config(edited)
    before = Counter(epochs_trained(searched))
    searched.run()
    assert Counter(epochs_trained(searched)) == before, "no epoch trained again"
    logs = "".join(log.read_text() for log in (searched.directory / "logs/search").glob("*.epochs-2.log"))
    assert logs.count("scored the first 2 epochs of attempt") == 4, logs  # rung 0 kept 9 // 2
    decisions = [json.loads((searched.directory / f"results/search/rung-{k}.json").read_text()) for k in range(5)]
    assert [d["epochs"] for d in decisions] == [1, 2, 4, 8, 9]
    assert [len(d["configurations"]) for d in decisions] == [9, 4, 2, 1, 1]
    # Scores at a budget are those of the epochs trained to it: rung 0 is the first search's rung 0.
    first = json.loads(searched.first_rung0)
    assert [(c["id"], c["mean"]) for c in decisions[0]["configurations"]] == [
        (c["id"], c["mean"]) for c in first["configurations"]
    ]
