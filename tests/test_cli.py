"""snakeddp runs: the terminal table of finished runs."""

from __future__ import annotations

import json

import pytest

from snakeddp.cli import main

pytestmark = pytest.mark.e2e


def test_runs_table(sweep_workflow, capsys):
    assert main(["runs", "--results", str(sweep_workflow.directory / "results")]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split()
    for column in ("run", "launch.devices", "val_loss", "epochs", "samples/s", "launcher"):
        assert column in header
    assert [line.split()[0] for line in lines[1:]] == ["devices-1", "devices-2"]
    assert "torchrun" in lines[1] and "3/3" in lines[1]


def test_runs_json_matches_provenance(sweep_workflow, capsys):
    results = sweep_workflow.directory / "results"
    assert main(["runs", "--json", "--results", str(results)]) == 0
    rows = {row["run"]: row for row in json.loads(capsys.readouterr().out)}
    for run, row in rows.items():
        record = json.loads((results / "runs" / run / "provenance.json").read_text())
        assert row["best val_loss"] == record["training"]["best_val_loss"]
        assert row["launch.devices"] == record["config"]["launch"]["devices"]
        assert row["job id"] == record["launch"]["job_id"]


def test_no_runs(tmp_path, capsys):
    assert main(["runs", "--results", str(tmp_path)]) == 1
    assert "no finished runs" in capsys.readouterr().out
