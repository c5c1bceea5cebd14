"""The whole pipeline on the local profile, driven through the real Snakemake CLI, its jobs forked from one kept
warm process (`snakeddp warm`, as a user keeps one: 58 -> 40 s of CPU for the file); the warm process each
invocation starts for itself is the path tests/e2e/test_interrupt.py, test_hang.py and test_terminal.py take."""

import csv
import json
import re

import pytest
import yaml

from tests.helpers import REPO, Workflow, copy_of, job_counts
from tests.platforms.conformance import Conformance, Finished

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kept_warm")]


def read_csv(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The repository's default config (a 2-run sweep, one run with 2 DDP processes), run once."""
    flow = Workflow(tmp_path_factory.mktemp("default"))
    flow.write_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    flow.run()
    return flow


def variant(flow: Workflow, tmp_path, edit) -> Workflow:
    """The same working directory with an edited config file (for dry runs)."""
    config = yaml.safe_load(flow.configfile.read_text())
    edit(config)
    other = Workflow(flow.directory)
    other.configfile = tmp_path / "variant.yaml"
    other.write_config(config)
    return other


def upstream_of_report(planned: dict[str, int]) -> dict[str, int]:
    """Planned jobs other than the report's (which rerun whenever any run does)."""
    assert planned.get("all") == 1 and planned.get("report") == 1, planned
    return {rule: n for rule, n in planned.items() if rule not in ("report", "all")}


def test_default_run_trains_learnable_labels_with_ddp(default_run):
    rows = {row["run_id"]: row for row in read_csv(default_run.directory / "results/report/runs.csv")}
    assert set(rows) == {"devices-1", "devices-2"}
    for row in rows.values():
        assert float(row["at_best:val_acc"]) > 0.8, "teacher labels are learnable: far above the 0.5 of chance"
        assert row["status"] in {"completed", "early_stopped"}
    assert rows["devices-2"]["world_size"] == "2"
    record = json.loads((default_run.directory / "results/runs/devices-2/provenance.json").read_text())
    ranks = record["launch"]["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    assert all(r["host"] for r in ranks) and len({r["pid"] for r in ranks}) == 2
    assert record["launch"]["launcher"] == "direct" and record["launch"]["backend"] == "gloo"
    metrics = read_csv(default_run.directory / "results/runs/devices-2/metrics.csv")
    assert [int(r["partition"]) for r in metrics] == [e % 4 for e in range(len(metrics))]


@pytest.fixture(scope="module")
def finished(default_run):
    """What every platform must give (tests/platforms/conformance.py), read from the default run: the same
    command typed again there, and a layout the local platform refuses before any job (a dry run)."""
    again = default_run.run()
    refused = default_run.run("-n", "--config", "launch={nodes: 2}", check=False)
    return Finished(default_run.directory, again, refused)


class TestLocalConformance(Conformance):
    platform = "local"
    refused_says = "launch.nodes=2, but the local profile runs on this machine only"


def test_learning_rate_change_reruns_only_training_and_report(default_run, tmp_path):
    flow = variant(default_run, tmp_path, lambda c: c["model"].update(lr=0.01))
    assert upstream_of_report(flow.planned_jobs()) == {"run_config": 2, "train": 2}


def test_feature_change_regenerates_data(default_run, tmp_path):
    flow = variant(default_run, tmp_path, lambda c: c["data"].update(num_features=16))
    assert upstream_of_report(flow.planned_jobs()) == {
        "data_partition": 4,
        "data_val": 1,
        "data_manifest": 1,
        "run_config": 2,
        "train": 2,
    }


def test_sweep_point_change_reruns_only_that_run(default_run, tmp_path):
    """devices 2 becomes 3: that point is a new run, devices-3, trained; devices-1 keeps its results."""
    flow = variant(default_run, tmp_path, lambda c: c["sweep"].update({"launch.devices": [1, 3]}))
    planned = flow.run("--dry-run")  # one dry run: its table of jobs and its jobs' lines
    assert upstream_of_report(job_counts(planned.stdout + planned.stderr)) == {"run_config": 1, "train": 1}
    assert set(re.findall(r"^Job \d+: run (\S+): ", planned.stdout + planned.stderr, re.M)) == {"devices-3"}


def test_removing_a_sweep_point_reruns_no_run(default_run, tmp_path):
    flow = variant(default_run, tmp_path, lambda c: c["sweep"].update({"launch.devices": [1]}))
    assert upstream_of_report(flow.planned_jobs()) == {}


def test_more_partitions_generates_only_the_new_ones(default_run, tmp_path):
    flow = copy_of(default_run, tmp_path / "copy")
    work = flow.directory
    train_dir = next((work / "results/data").glob("synthetic-*/train"))
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in train_dir.glob("part-*")}
    assert len(before) == 8

    config = yaml.safe_load(flow.configfile.read_text())
    config["data"]["num_train_files"] = 6
    flow.write_config(config)
    planned = flow.planned_jobs()
    assert planned["data_partition"] == 2 and "data_val" not in planned
    flow.run(str((train_dir.parent / "manifest-6.json").relative_to(work)))  # the data stage only

    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in train_dir.glob("part-*")}
    assert {n: v for n, v in after.items() if n in before} == before, "old partitions untouched, bytes and mtime"
    assert sorted(set(after) - set(before)) == [
        "part-00004.json",
        "part-00004.safetensors",
        "part-00005.json",
        "part-00005.safetensors",
    ]
    manifest = json.loads((train_dir.parent / "manifest-6.json").read_text())
    assert len(manifest["train"]) == 6


def test_invalid_config_fails_before_any_job(workflow):
    workflow.write_config({"model": {"lrr": 0.1}, "data": {"num_train_files": -2}, "trainer": {"max_epochs": "x"}})
    done = workflow.run(check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "model.lrr: unknown key (did you mean 'lr'?)" in output
    assert "data.num_train_files: -2 is less than the minimum of 1" in output
    assert "trainer.max_epochs: 'x' is not of type 'integer'" in output
    assert not (workflow.directory / "results").exists()


def test_an_edit_with_a_whole_number_float_still_reaches_run_yaml(default_run, tmp_path):
    """num_train_files: 4.0 once named the manifest manifest-4.0.json, which no rule makes: Snakemake
    then kept the existing provenance.json as if it were a source file, dropped train and run_config
    from the plan, and the learning rate edit never reached run.yaml (exit 0, only the report ran)."""
    flow = copy_of(default_run, tmp_path / "copy")
    work = flow.directory
    config = yaml.safe_load(flow.configfile.read_text())
    config["model"]["lr"] = 0.01
    config["data"]["num_train_files"] = 4.0
    flow.write_config(config)
    assert upstream_of_report(flow.planned_jobs()) == {"run_config": 2, "train": 2}
    flow.run(*(f"results/runs/{run}/provenance.json" for run in ("devices-1", "devices-2")))
    for run in ("devices-1", "devices-2"):
        run_dir = work / "results" / "runs" / run
        assert yaml.safe_load((run_dir / "run.yaml").read_text())["config"]["model"]["lr"] == 0.01
        record = json.loads((run_dir / "provenance.json").read_text())
        assert record["config"]["model"]["lr"] == 0.01
        assert record["config"]["data"]["num_train_files"] == 4
