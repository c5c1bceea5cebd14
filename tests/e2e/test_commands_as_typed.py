"""Snakemake's own commands typed in a fresh clone's root with no profile: reports, summaries, dry
runs, the DAG, unlocking and listing changes need no cores and are never refused; a real run
without cores gets Snakemake's one line saying what to type."""

from __future__ import annotations

import json
import shlex
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from tests import workflow_venv
from tests.checkout import copy_of_this_checkout
from tests.helpers import TINY, subprocess_env

pytestmark = pytest.mark.e2e

# Two runs, one of which needs 2 cores: more than a dry run's 1. One epoch: no test here looks at training's
# progress, only at what each command says of the finished runs.
CONFIG = {**TINY, "trainer": {**TINY["trainer"], "max_epochs": 1}, "sweep": {"launch.devices": [1, 2]}}


def fresh_clone(root: Path) -> Path:
    """This checkout's tracked and new files (nothing ignored) copied into a new git repository."""
    copy_of_this_checkout(root)
    (root / "config" / "config.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def typed(root: Path, command: str) -> subprocess.CompletedProcess:
    """``command`` as a user types it in ``root``; stdout and stderr as one string."""
    argv = shlex.split(command)
    assert argv[0] == "snakemake"
    return subprocess.run(
        [workflow_venv.snakemake(), *argv[1:]],
        cwd=root,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
    )


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout
    assert "Traceback" not in done.stdout and "WorkflowError" not in done.stdout, done.stdout
    return done.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_clone(tmp_path_factory.mktemp("clone"))


def test_a_dry_run_plans_every_run_and_notes_what_a_real_run_would_need(clone):
    output = ok(typed(clone, "snakemake -n"))
    assert "This was a dry-run" in output
    notes = [line for line in output.splitlines() if "HINT:" in line]
    assert len(notes) == 1, output
    assert notes[0].startswith("Dry run; a real run would stop here: run devices-2: needs 2 cores") and (
        "HINT: run with --cores 2" in notes[0]
    )
    assert "HINT:" not in ok(typed(clone, "snakemake -n --cores 2"))


def test_a_typed_key_the_sweep_sets_is_refused_and_sweeping_it_as_hinted_plans_it(clone):
    refused = typed(clone, "snakemake -n --config 'launch={devices: 3}'")
    lines = [line for line in refused.stdout.splitlines() if "HINT:" in line]
    assert refused.returncode != 0 and len(lines) == 1, refused.stdout
    assert "--config sets launch.devices=3, and the sweep sets launch.devices in every run" in lines[0]
    hinted = lines[0].split("e.g. --config ", 1)[1].split(" (it replaces", 1)[0]
    assert hinted == "'sweep={launch.devices: [3]}'"
    output = ok(typed(clone, f"snakemake -n --cores 3 --config {hinted}"))
    assert "run devices-3: write run.yaml" in output and "devices-1" not in output


def test_a_mistyped_config_or_configfile_is_one_line_and_its_hint_followed_plans_the_runs(clone):
    """Snakemake refuses these as it parses the command line, before the Snakefile: a traceback for a missing
    --configfile, a message naming no file or line for one that is not YAML, and one naming no entry for a dotted
    --config key (Hydra's, LightningCLI's). Each is one line saying what to do, and doing it plans the runs."""

    def refused(command: str) -> str:
        done = typed(clone, command)
        lines = [line for line in done.stdout.splitlines() if "HINT:" in line]
        assert done.returncode != 0 and len(lines) == 1 and "Traceback" not in done.stdout, done.stdout
        return lines[0]

    mine = clone / "mine.yaml"
    line = refused("snakemake -n --cores 2 --configfile mine.yaml")
    assert line.startswith(f"snakeddp: --configfile mine.yaml: no such file or directory ({mine})"), line
    mine.write_text("trainer:\n\tmax_epochs: 2\n")  # made where the line says, with a tab as an editor may put
    line = refused("snakemake -n --cores 2 --configfile mine.yaml")
    assert "mine.yaml is not valid YAML: line 2, column 1" in line and "HINT: mend line 2 of mine.yaml" in line
    mine.write_text("trainer:\n  max_epochs: 2\n")
    assert "run devices-2: write run.yaml" in ok(typed(clone, "snakemake -n --cores 2 --configfile mine.yaml"))

    line = refused("snakemake -n --cores 2 --config trainer.max_epochs=2 seed=3")
    hinted = line.split("HINT: type --config ", 1)[1].split(" instead", 1)[0]
    assert hinted == "'trainer={max_epochs: 2}'", line
    assert "run devices-2: write run.yaml" in ok(typed(clone, f"snakemake -n --cores 2 --config {hinted} seed=3"))


def test_a_summary_lists_the_outputs_of_every_run(clone):
    output = ok(typed(clone, "snakemake -n --summary"))
    assert "results/runs/devices-2/provenance.json" in output and "results/runs/devices-1/provenance.json" in output


def test_the_dag_unlock_and_list_changes_need_no_cores(clone):
    assert ok(typed(clone, "snakemake --dag")).count("digraph") == 1
    assert "Unlocked working directory." in ok(typed(clone, "snakemake --unlock"))
    ok(typed(clone, "snakemake --list-changes params"))
    ok(typed(clone, "snakemake --list-rules"))
    assert not (clone / "results").exists()


def test_a_real_run_without_cores_says_what_to_type_in_one_line(clone):
    done = typed(clone, "snakemake")
    assert done.returncode == 1, done.stdout
    errors = [line for line in done.stdout.splitlines() if "Error" in line]
    assert errors == [
        "Error: cores have to be specified for local execution (use --cores N with N being a number >= 1 or 'all')"
    ], done.stdout
    assert len(done.stdout.splitlines()) <= 4, done.stdout
    assert not (clone / "results").exists()


def test_a_report_before_anything_ran_is_one_line_with_a_hint(clone):
    done = typed(clone, "snakemake --report report.zip")
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    assert [line for line in lines if "HINT:" in line] == [
        "Nothing to report yet: the workflow has not made its report (results/report/report.html is missing). "
        "HINT: run the workflow first (snakemake --profile local), then the same --report command."
    ], done.stdout
    # Before it, only Snakemake's profile and DAG lines; no warning per missing record, no error of its own.
    assert len(lines) <= 3 and lines[-1].startswith("Nothing to report yet"), done.stdout
    assert not (clone / "report.zip").exists() and not (clone / "results").exists()


def test_after_a_run_the_report_summary_and_cleanup_work_without_a_profile(clone):
    ok(typed(clone, "snakemake --profile profiles/local"))
    ok(typed(clone, "snakemake --report report.zip"))
    with zipfile.ZipFile(clone / "report.zip") as archive:
        assert any(name.endswith("report.html") for name in archive.namelist())
    # The report is the user's file, not the checkout's: git does not list it.
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, capture_output=True)
    assert b"report.zip" not in status.stdout
    assert "results/runs/devices-2/provenance.json" in ok(typed(clone, "snakemake --summary"))
    output = ok(typed(clone, "snakemake -n"))
    assert "Nothing to be done" in output and "HINT" not in output
    assert changed_files(ok(typed(clone, "snakemake --list-changes params"))) == []
    # A key only the report records (a scheduler request: no run.yaml changes) is named in the report's reason too.
    output = ok(typed(clone, "snakemake -n --config 'launch={runtime: 100}'"))
    reasons = [line for line in output.splitlines() if line.startswith("Reason: Params have changed")]
    runtime = CONFIG["launch"]["runtime"]
    assert reasons == [f"Reason: Params have changed since last execution: launch.runtime: {runtime} → 100"], output
    # A dry run after an edit that retrains notes what the real run would stop on, as for a new run.
    output = ok(typed(clone, "snakemake -n --cores 2 --config 'launch={threads_per_process: 2}'"))
    notes = [line for line in output.splitlines() if "HINT:" in line]
    assert len(notes) == 1 and notes[0].startswith("Dry run; a real run would stop here: run devices-2: needs 4 cores")
    # Last: without its metadata Snakemake no longer compares the report's parameters.
    ok(typed(clone, "snakemake --cleanup-metadata results/report/runs.csv"))


def test_an_edit_is_named_by_its_key_in_the_reason_and_the_list_of_changes(clone):
    if not (clone / "results/runs/devices-1/provenance.json").exists():
        ok(typed(clone, "snakemake --profile profiles/local"))
    output = ok(typed(clone, "snakemake -n --config 'model={lr: 0.01}'"))
    reasons = [line for line in output.splitlines() if line.startswith("Reason: Params have changed")]
    assert reasons == ["Reason: Params have changed since last execution: model.lr: 0.003 → 0.01"] * 2, output
    # The edit's reasons stay short lines; Snakemake's own list of the report's outputs (`all`) may be long.
    assert max(len(line) for line in output.splitlines() if not line.startswith("Reason: Input files updated")) < 400
    listed = changed_files(ok(typed(clone, "snakemake --list-changes params --config 'model={lr: 0.01}'")))
    # The run configs, and the report's outputs (its RO-Crate records the config).
    assert sorted(path for path in listed if not path.startswith("results/report/")) == [
        "results/runs/devices-1/run.yaml",
        "results/runs/devices-2/run.yaml",
    ]


def changed_files(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("results/")]


def test_a_record_of_packages_since_changed_is_captured_again_by_the_next_run(clone):
    """The record says the venv had a package it no longer has (as after a pip uninstall)."""
    if not (clone / "results/runs/devices-1/provenance.json").exists():
        ok(typed(clone, "snakemake --profile profiles/local"))
    path = clone / "results/envs/train.json"
    before = json.loads(path.read_text())
    path.write_text(json.dumps({**before, "packages": {**before["packages"], "ghost-package": "1.0"}}))
    note = "environment: 1 package(s) changed since results/envs/train.json was recorded"
    assert f"{note}; a run records it again" in ok(typed(clone, "snakemake -n"))
    assert f"{note}; a run records it again" in ok(typed(clone, "snakemake --summary"))
    assert "ghost-package" in path.read_text(), "nothing that runs no job touches the record"
    output = ok(typed(clone, "snakemake --profile profiles/local"))
    assert f"{note}: recording it again" in output
    after = json.loads(path.read_text())
    assert "ghost-package" not in after["packages"] and after["hash"] == before["hash"]
    # The runs cite the record as captured again; this environment is the one they finished on.
    assert "restored it, nothing trained" in output
    provenance = json.loads((clone / "results/runs/devices-2/provenance.json").read_text())
    assert provenance["environment"]["environment_hash"] == after["hash"]
