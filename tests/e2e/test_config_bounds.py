"""Configs that cannot become runs are refused by the real CLI at plan time, in one line, and the
HINT, done as written, gives a plan."""

from __future__ import annotations

import copy
import hashlib

import pytest

from tests.helpers import TINY, Workflow, alias_bomb

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kept_warm")]


def error_lines(done) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


def test_an_alias_bomb_ends_the_dry_run_in_one_line(workflow: Workflow):
    workflow.configfile.write_text(alias_bomb(9, key="model"))
    done = workflow.run("-n", check=False, timeout=120)
    assert done.returncode == 1
    assert [line for line in error_lines(done) if "HINT:" in line] == error_lines(done)[-1:]
    assert "more than 50000 values once YAML aliases" in done.stderr
    assert not (workflow.directory / "results").exists()


def test_a_sweep_value_snakemake_cannot_name_is_refused_and_moving_it_out_of_sweep_plans(workflow: Workflow):
    periodic = [8] * 25
    cfg = {**copy.deepcopy(TINY), "sweep": {"model.hidden_sizes": [periodic]}}
    workflow.write_config(cfg)
    done = workflow.run("-n", check=False)
    assert done.returncode == 1, done.stdout[-2000:]
    (line,) = [line for line in error_lines(done) if "HINT:" in line]
    assert line.startswith("sweep: the run name made from model.hidden_sizes=") and "repeats 'x8' over and over" in line
    assert "set it outside sweep:" in line
    # The HINT: one value needs no sweep.
    del cfg["sweep"]
    cfg["model"]["hidden_sizes"] = periodic
    workflow.write_config(cfg)
    assert workflow.planned_jobs()["train"] == 1


def test_a_run_config_reaches_its_step_as_a_file_named_by_its_sha256(workflow: Workflow, tiny_config):
    tiny_config["model"]["lr"] = 0.0123
    workflow.write_config(tiny_config)
    planned = workflow.run("-n", "-p", "results/runs/base/run.yaml")
    (command,) = [line for line in planned.stdout.splitlines() if "snakeddp.steps run-config" in line]
    assert "0.0123" not in command and '"config"' not in command
    (path,) = [word for word in command.split() if word.startswith(".snakemake/snakeddp/params/")]
    stored = workflow.directory / path
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == stored.stem and "0.0123" in stored.read_text()
    workflow.run("results/runs/base/run.yaml")
    assert "lr: 0.0123" in (workflow.directory / "results/runs/base/run.yaml").read_text()
