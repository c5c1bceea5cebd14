"""Current runs (the config's) and history, as `snakeddp runs` and the report tell them."""

from __future__ import annotations

import contextlib
import copy
import os
from types import SimpleNamespace

import yaml

from snakeddp.data.identity import fingerprint
from snakeddp.data.plan import resolve_tables
from snakeddp.run import current


def write(path, config):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_the_flags_snakemake_was_given_plan_the_current_runs(tmp_path):
    write(tmp_path / current.CONFIG_FILE, {"sweep": {"launch.devices": [1, 2]}})
    assert current.from_command_line(tmp_path, [], []) == ["devices-1", "devices-2"]
    mine = write(tmp_path / "my-sweep.yaml", {"sweep": {"seed": [1, 2], "model.lr": [0.1]}})
    assert current.from_command_line(tmp_path, [mine], []) == ["lr-0.1_seed-1", "lr-0.1_seed-2"]
    assert current.from_command_line(tmp_path, [mine], ["sweep={seed: [3]}", "experiment=again"]) == ["again--seed-3"]


def test_without_any_config_file_nothing_is_known_and_a_configfile_alone_is_enough(tmp_path):
    assert current.from_command_line(tmp_path, [], []) is None
    mine = write(tmp_path / "elsewhere" / "config.yaml", {"sweep": {"seed": [5]}})
    assert current.from_command_line(tmp_path, [mine], []) == ["seed-5"]


def planned_runs(tmp_path, config) -> current.Planned:
    write(tmp_path / current.CONFIG_FILE, config)
    return current.planned_from_command_line(tmp_path, [], [])


def finished(planned: current.Planned, run_id: str, **edits) -> SimpleNamespace:
    """A finished run as the listing reads it: its id and a record of the run config the plan has for it, with
    ``edits`` (section -> keys) laid over it: an attempt of another config."""
    config = copy.deepcopy(planned.runs[run_id]["config"])
    for section, values in edits.items():
        config[section].update(values)
    return SimpleNamespace(run_id=run_id, provenance={"run_id": run_id, "config": config})


def test_split_keeps_the_configs_order_and_sends_the_rest_to_history(tmp_path):
    planned = planned_runs(tmp_path, {"sweep": {"launch.devices": [1, 2, 3]}})
    runs = [finished(planned, rid) for rid in ("devices-2", "devices-1")]
    runs.insert(1, SimpleNamespace(run_id="old", provenance={"run_id": "old", "config": runs[0].provenance["config"]}))
    now, history = current.split(runs, planned)
    assert [run.run_id for run in now] == ["devices-1", "devices-2"]
    assert [run.run_id for run in history] == ["old"]


def test_a_run_directory_holding_an_attempt_of_another_config_is_history_not_current(tmp_path):
    """devices-1's directory holds an attempt trained before model.lr was edited (snakemake has not trained it
    again): it was called current, as if the config's run had finished."""
    planned = planned_runs(tmp_path, {"model": {"lr": 0.01}, "sweep": {"launch.devices": [1, 2]}})
    edited = finished(planned, "devices-1", model={"lr": 0.003})
    now, history = current.split([edited, finished(planned, "devices-2")], planned)
    assert [run.run_id for run in now] == ["devices-2"] and history == [edited]
    # Scheduler requests are no part of a run (run.yaml keeps a finished run's), nor what a search's rung sets.
    assert planned.trained(finished(planned, "devices-1", launch={"runtime": 999, "mem_mb": 1}).provenance)
    assert not planned.trained(finished(planned, "devices-1", trainer={"max_epochs": 1}).provenance)
    searched = planned_runs(tmp_path, {"sweep": {"model.lr": [0.1, 0.2]}, "search": {"method": "successive_halving"}})
    assert searched.trained(finished(searched, "lr-0.1", trainer={"max_epochs": 1}).provenance)
    assert not planned.trained({"run_id": "devices-1", "config": {"model": {"lr": "not a number"}}})


def test_a_tables_checksum_the_workflow_fills_in_is_no_difference_and_its_path_is(tmp_path):
    table = {"path": "data/t.csv", "label": "y"}
    planned = planned_runs(tmp_path, {"data": {"source": "table", "table": table}})
    (run_id,) = planned.ids
    filled = {**planned.runs[run_id]["config"]["data"]["table"], "sha256": "a" * 64, "features": ["x1", "x2"]}
    assert planned.trained(finished(planned, run_id, data={"table": filled}).provenance)
    assert not planned.trained(finished(planned, run_id, data={"table": {**filled, "path": "data/u.csv"}}).provenance)


def test_a_table_edited_in_place_makes_its_runs_history_and_a_touched_one_does_not(tmp_path):
    """The workflow fills in a table's checksum when it plans, and trains a run again when the table's content
    changed; `snakeddp runs` called it current (it left the checksum out), so an edited table's runs read as done."""
    table = tmp_path / "data" / "t.csv"
    table.parent.mkdir()
    table.write_text("x1,x2,y\n0.5,1.5,1\n-0.5,2.5,0\n" * 50)
    config = {"data": {"source": "table", "table": {"path": "data/t.csv", "label": "y"}}}
    planned = planned_runs(tmp_path, config)
    (run_id,) = planned.ids
    # The record of a run trained on this table: its run config as the workflow's plan fills it in.
    trained = finished(planned, run_id)
    with contextlib.chdir(tmp_path):
        resolve_tables({run_id: {"config": trained.provenance["config"]}})
    assert trained.provenance["config"]["data"]["table"]["sha256"] == fingerprint(table)
    assert planned_runs(tmp_path, config).trained(trained.provenance)
    os.utime(table, (1, 1))  # touched (or copied with its times): the same content, the same run
    assert planned_runs(tmp_path, config).trained(trained.provenance)
    table.write_text(table.read_text().replace("0.5,1.5,1", "0.5,1.5,0", 1))  # one label edited in place
    assert not planned_runs(tmp_path, config).trained(trained.provenance)
    # The table gone: the workflow refuses to plan (and says why); runs compares without its checksum, as before.
    table.unlink()
    assert planned_runs(tmp_path, config).trained(trained.provenance)
