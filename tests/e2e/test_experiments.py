"""A sweep's identity is its content, typed as a user types it from the checkout's root with the bare
profile name: a sweep given with --configfile replaces config/config.yaml's, reordering its keys plans
no training, and `snakeddp runs` lists the same current runs as the report, the others as history."""

from __future__ import annotations

import csv
import json
import subprocess

import pytest
import yaml

from tests import workflow_venv
from tests.checkout import Checkout
from tests.helpers import REPO, TINY, subprocess_env

pytestmark = pytest.mark.e2e

LRS = [0.01, 0.003]
MY_SWEEP = {**TINY, "trainer": {**TINY["trainer"], "max_epochs": 1}, "sweep": {"model.lr": LRS, "seed": [1, 2]}}
RUN_IDS = ["lr-0.01_seed-1", "lr-0.01_seed-2", "lr-0.003_seed-1", "lr-0.003_seed-2"]
# The history step: one of the two learning rates, the same runs by content and so by name.
ONE_LR = "sweep={model.lr: [0.01], seed: [1, 2]}"


def planned_rules(output: str) -> dict[str, int]:
    """Rule -> job count from a dry run's job table (empty when there is nothing to do)."""
    counts: dict[str, int] = {}
    table = output.split("Job stats:")[-1] if "Job stats:" in output else ""
    for line in table.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
            counts[parts[0]] = int(parts[1])
    return counts


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    """A checkout whose config/config.yaml sweeps launch.devices (the default's), trained once with
    `snakemake --profile local --configfile my-sweep.yaml` (2 learning rates x 2 seeds, 1 epoch)."""
    checkout = Checkout(tmp_path_factory.mktemp("experiments"))
    # `--profile local` as the set-up makes it work: tools/profiles.sh links the profiles here.
    env = subprocess_env(XDG_CONFIG_HOME=str(tmp_path_factory.mktemp("xdg")))
    subprocess.run([str(REPO / "tools" / "profiles.sh")], env=env, check=True, capture_output=True)
    (checkout.root / "my-sweep.yaml").write_text(yaml.safe_dump(MY_SWEEP, sort_keys=False))
    checkout.env = env
    checkout.first = checkout.snakemake("--profile", "local", "--configfile", "my-sweep.yaml", env=env)
    assert checkout.first.returncode == 0, checkout.first.stdout[-5000:]
    return checkout


def snakeddp(project: Checkout, *args: str) -> str:
    done = subprocess.run(
        [workflow_venv.snakeddp(), *args],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_sweep_given_with_configfile_replaces_the_config_files_sweep(project):
    assert sorted(path.name for path in (project.root / "results" / "runs").iterdir()) == sorted(RUN_IDS)
    assert "devices" not in project.first.stdout, "config.yaml's launch.devices sweep did not merge in"
    # --config's sweep replaces it too, and the last one given wins whole.
    done = project.snakemake("-n", "--profile", "local", "--config", "sweep={model.lr: [0.03]}", env=project.env)
    assert done.returncode == 0 and planned_rules(done.stdout)["train"] == 1, done.stdout
    assert "run lr-0.03: train" in done.stdout and "devices-" not in done.stdout


def test_the_same_sweep_with_its_keys_reordered_plans_no_train_job(project):
    reordered = {**MY_SWEEP, "sweep": {"seed": [1, 2], "model.lr": LRS}}
    assert list(reordered["sweep"]) != list(MY_SWEEP["sweep"])
    (project.root / "my-sweep.yaml").write_text(yaml.safe_dump(reordered, sort_keys=False))
    done = project.snakemake("-n", "--profile", "local", "--configfile", "my-sweep.yaml", env=project.env)
    assert done.returncode == 0, done.stdout
    assert "Nothing to be done" in done.stdout, planned_rules(done.stdout) or done.stdout


def test_snakeddp_runs_and_the_report_list_the_same_current_runs(project):
    done = project.snakemake("--profile", "local", "--configfile", "my-sweep.yaml", "--config", ONE_LR, env=project.env)
    assert done.returncode == 0, done.stdout[-5000:]
    assert " train " not in done.stdout and "run lr-" not in done.stdout, "the runs were finished: nothing trains"
    with (project.root / "results" / "report" / "runs.csv").open(newline="") as handle:
        reported = [row["run_id"] for row in csv.DictReader(handle)]
    assert reported == RUN_IDS[:2]

    rows = json.loads(snakeddp(project, "runs", "--json", "--configfile", "my-sweep.yaml", "--config", ONE_LR))
    assert [row["run"] for row in rows if row["current"]] == reported
    assert sorted(row["run"] for row in rows if not row["current"]) == sorted(RUN_IDS[2:])
    table = snakeddp(project, "runs", "--configfile", "my-sweep.yaml", "--config", ONE_LR)
    now, history = table.split("\nhistory: ")
    assert all(rid in now for rid in reported) and not any(rid in now for rid in RUN_IDS[2:]), table
    assert all(rid in history for rid in RUN_IDS[2:]), table
    # Plain, it answers for config/config.yaml, whose two runs have not been trained here.
    plain = snakeddp(project, "runs")
    assert "not finished yet: devices-1, devices-2" in plain
    assert all(rid in plain.split("history: ")[1] for rid in RUN_IDS), plain
