"""`snakemake --profile profiles/local --config KEY='{...}'` typed in a checkout, as the README shows."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.checkout import Checkout
from tests.helpers import TINY

pytestmark = pytest.mark.e2e


@pytest.fixture
def checkout(tmp_path):
    checkout = Checkout(tmp_path)
    checkout.write_config(TINY)
    return checkout


def planned(checkout: Checkout, path: str) -> dict:
    """A rule's JSON parameter file, as a dry run wrote it (a path relative to the checkout)."""
    return json.loads((checkout.root / path).read_text())


# Nested overrides, one per section, with what run.yaml must hold for each.
OVERRIDES = {
    "trainer": ("trainer={max_epochs: 3}", {"max_epochs": 3}),
    "model": ("model={lr: 0.001}", {"lr": 0.001}),
    "launch": ("launch={devices: 2.0, threads_per_process: 1.0}", {"devices": 2, "threads_per_process": 1}),
}


@pytest.fixture(scope="module")
def overridden(tmp_path_factory) -> dict:
    """run.yaml's config as `snakemake results/runs/base/run.yaml --config ...` wrote it, every override above
    typed in the one command (each sets a section of its own, so none hides another)."""
    checkout = Checkout(tmp_path_factory.mktemp("overrides"))
    checkout.write_config(TINY)
    typed = [override for override, _ in OVERRIDES.values()]
    done = checkout.snakemake("results/runs/base/run.yaml", "--profile", "profiles/local", "--config", *typed)
    assert done.returncode == 0, done.stdout
    return yaml.safe_load((checkout.root / "results/runs/base/run.yaml").read_text())["config"]


@pytest.mark.parametrize("section", list(OVERRIDES))
def test_nested_overrides_reach_run_yaml_with_the_schema_types(overridden, section):
    expected = OVERRIDES[section][1]
    written = overridden[section]
    assert {key: written[key] for key in expected} == expected
    assert all(type(written[key]) is type(value) for key, value in expected.items())


@pytest.mark.dev_venv  # a tensorboard tracker
def test_sweep_and_tracking_overrides_plan_the_runs_they_ask_for(checkout):
    done = checkout.snakemake(
        "--profile", "profiles/local", "-n", "-p",  # -p: the profiles no longer print shell commands
        "--config", "sweep={model.lr: [0.001, 0.01]}", "tracking={tensorboard: {enabled: true}}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    # What the printed commands name: each run's config (its run_config job's --run) and the resolved
    # config the report records (its --params), files the plan wrote (snakeddp.workflow.paramfile).
    runs = {run: planned(checkout, path) for run, path in re.findall(r"--run-id (\S+) --run (\S+) ", done.stdout)}
    assert {run: (config["point"], config["config"]["model"]["lr"]) for run, config in runs.items()} == {
        "lr-0.001": ({"model.lr": 0.001}, 0.001),
        "lr-0.01": ({"model.lr": 0.01}, 0.01),
    }
    (report,) = re.findall(r"snakeddp\.steps report --params (\S+) ", done.stdout)
    resolved = planned(checkout, report)["config"]
    assert resolved["tracking"]["tensorboard"] == {"enabled": True}
    assert resolved["sweep"] == {"model.lr": [0.001, 0.01]}


def test_an_override_that_is_not_the_type_names_key_value_and_type(checkout):
    done = checkout.snakemake("--profile", "profiles/local", "-n", "--config", "trainer={max_epochs: three}")
    assert done.returncode == 1
    assert "trainer.max_epochs: 'three' is not of type 'integer'" in done.stdout
    assert not (checkout.root / "results").exists()
    # A rising metric over config/config.yaml's {metric: val_loss, mode: min} (the checkout's): not that min.
    checkout.write_config({**TINY, "trainer": {**TINY["trainer"], "monitor": {"metric": "val_loss", "mode": "min"}}})
    done = checkout.snakemake("--profile", "profiles/local", "-n", "--config", "trainer={monitor: {metric: val_acc}}")
    assert done.returncode == 1 and "HINT: set trainer.monitor.mode: max beside it" in done.stdout, done.stdout
