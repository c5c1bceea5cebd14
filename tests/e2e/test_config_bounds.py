"""Configs that cannot become runs are refused by the real CLI at plan time, in one line, and the
HINT, done as written, gives a plan."""

from __future__ import annotations

import copy

import pytest

from tests.config.test_bounds import alias_bomb
from tests.helpers import TINY, Workflow

pytestmark = pytest.mark.e2e


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
