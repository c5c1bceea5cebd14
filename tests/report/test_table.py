"""The runs table: which parameters count as varying, the flattened config keys, and every try's account."""

from __future__ import annotations

import csv
import json

import pytest

from snakeddp.config import flatten
from snakeddp.report.table import Rows, aligned, varying_params
from snakeddp.util.numbers import readable


def record(point: dict, **config) -> dict:
    base = {"seed": 1, "model": {"lr": 0.1, "hidden_sizes": [8]}, "launch": {"devices": 1}}
    for section, values in config.items():
        base[section] = {**base[section], **values}
    return {"sweep_point": point, "config": base}


def test_flatten_keeps_lists_as_leaves():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": 1, "a.c": [1, 2], "d": None}


def test_sweep_keys_first_then_other_keys_that_differ():
    records = [
        record({"launch.devices": 1}, model={"hidden_sizes": [8]}),
        record({"launch.devices": 2}, launch={"devices": 2}, model={"hidden_sizes": [16]}),
    ]
    assert varying_params(records) == ["launch.devices", "model.hidden_sizes"]


def test_sweep_key_with_one_value_among_several_runs_is_dropped():
    records = [record({"model.lr": 0.1}), record({"model.lr": 0.1})]
    records[1]["config"]["seed"] = 2
    assert varying_params(records) == ["seed"]


def test_single_run_shows_its_sweep_keys():
    assert varying_params([record({"model.lr": 0.1})]) == ["model.lr"]
    assert varying_params([record({})]) == []


def test_terminal_table_right_aligns_every_column_under_its_label():
    table = Rows(["run", "val acc", "job id"], [["devices-1", 0.91234567, None], ["devices-12", 12345.6, 7]])
    lines = aligned(table, readable).splitlines()
    assert lines == [
        "       run val acc job id",
        " devices-1  0.9123      –",
        "devices-12  12,346      7",
    ]
    assert Rows(["a", "b"], [[1, None]]).records() == [{"a": 1, "b": None}]


@pytest.mark.e2e
def test_runs_csv_accounts_for_every_try_of_every_run(sweep_workflow):
    results = sweep_workflow.directory / "results"
    with (results / "report/runs.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows
    for row in rows:
        record = json.loads((results / "runs" / row["run_id"] / "provenance.json").read_text())
        tried = json.loads(row["tries_account"])
        assert [t["number"] for t in tried] == [t["number"] for t in record["attempt"]["tries"]]
        for one in tried:
            assert sum(one["buckets"].values()) == pytest.approx(one["seconds"], abs=0.01)
            assert (one["queue_wait_s"], one["gpu_hours"], one["measured"]) == ("not known", 0.0, True)
        summed = record["timing"]["goodput"]["account"]["buckets"]
        assert {name: float(row[f"account_{name}"]) for name in summed} == pytest.approx(summed)
        assert (row["queue_wait_s"], float(row["gpu_hours"]), row["gpu_util_mean"]) == ("not known", 0.0, "")
