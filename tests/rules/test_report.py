"""The report stage in the workflow: outputs, reruns and Snakemake's own report."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import zipfile

import pytest
import yaml
from packaging.utils import canonicalize_name

from snakeddp.environment.lock import read_lock
from snakeddp.training.export import read_description
from tests.helpers import CONFIG_SECRET, REPO, SECRET_VALUES, SWEEP, Workflow, leaked

pytestmark = pytest.mark.e2e


def test_finished_sweep_has_nothing_to_do(sweep_workflow):
    assert sweep_workflow.planned_jobs() == {}


@pytest.mark.parametrize(
    "report", [{"title": "Another title"}, {"metrics": ["val_loss"], "figure_format": "svg"}, {"dpi": 80}]
)
def test_report_settings_rerun_only_the_report(sweep_workflow, report):
    flow = Workflow(sweep_workflow.directory)
    flow.configfile = sweep_workflow.directory / "config-report.yaml"
    flow.write_config({**SWEEP, "report": report})
    planned = flow.planned_jobs()
    assert planned == {"report": 1, "all": 1}, planned


def test_bad_report_setting_names_the_key(sweep_workflow):
    flow = Workflow(sweep_workflow.directory)
    flow.configfile = sweep_workflow.directory / "config-bad.yaml"
    flow.write_config({**SWEEP, "report": {"figure_format": "gif"}})
    done = flow.run("--dry-run", check=False)
    assert done.returncode != 0 and "report.figure_format" in done.stdout + done.stderr


def test_snakemake_report_includes_ours(sweep_workflow, tmp_path):
    target = tmp_path / "snakemake-report.zip"
    sweep_workflow.run("--report", str(target))
    names = zipfile.ZipFile(target).namelist()
    assert any(name.endswith("report.html") and "/data/raw/" in name for name in names), names[:20]
    assert any(name.endswith("curves.png") for name in names)
    assert yaml.safe_load((sweep_workflow.directory / "config.yaml").read_text()) == {**SWEEP, **CONFIG_SECRET}
    # Made to be shared too: no secret of the config's in any of its files.
    with zipfile.ZipFile(target) as archive:
        found = [(name, leaked(archive.read(name), SECRET_VALUES)) for name in archive.namelist()]
    assert not [(name, values) for name, values in found if values]


# Not azureml: that profile needs an azureml: section in the config, which the local sweep lacks.
@pytest.mark.parametrize("profile", ["slurm", None])
def test_finished_sweep_is_up_to_date_on_every_profile(sweep_workflow, profile):
    """Finished on the local profile: another profile, or none, has nothing to do (the report included)."""
    flow = Workflow(sweep_workflow.directory, profile=profile or "local")
    command = flow.command("--dry-run")
    if profile is None:  # plain snakemake: the workflow profile, and the cores the sweep needs (README)
        at = command.index("--profile")
        command[at : at + 2] = ["--cores", "2"]
    env = sweep_workflow.env  # the credentials the sweep ran with, as the user's shell keeps them
    done = subprocess.run(command, cwd=flow.directory, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "Nothing to be done" in done.stdout + done.stderr, done.stdout + done.stderr


# Put first on a process's path: imports of packages that only the dev lock installs fail, as they
# would in the .venv that `make run` sets up.
DEV_ONLY_BLOCKER = """
import sys
BLOCKED = {blocked!r}
class DevOnly:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (only in requirements-dev.lock)", name=name)
sys.meta_path.insert(0, DevOnly())
"""


def test_snakemake_report_needs_only_the_run_lock(sweep_workflow, tmp_path):
    """The README's `snakemake --report report.zip` after `make run`: nothing it imports is dev-only."""
    core, dev = read_lock(REPO / "envs" / "requirements.lock"), read_lock(REPO / "envs" / "requirements-dev.lock")
    dev_only = set(dev.pins) - set(core.pins)
    blocked = sorted(
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if {canonicalize_name(dist) for dist in dists} <= dev_only
    )
    assert "pytest" in blocked and "yaml" not in blocked
    (tmp_path / "sitecustomize.py").write_text(DEV_ONLY_BLOCKER.format(blocked=blocked))
    env = {**sweep_workflow.env, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO / "src")])}
    sweep_workflow.run("--report", str(tmp_path / "report.zip"), env=env)
    assert zipfile.is_zipfile(tmp_path / "report.zip")


def test_report_export_adds_an_export_job_per_run_and_the_report_links_each(workflow, tiny_config):
    workflow.write_config(tiny_config)
    assert "export" not in workflow.planned_jobs(), "off by default: no export job"
    workflow.write_config({**tiny_config, "report": {"export": True}})
    planned = workflow.planned_jobs()
    assert planned["export"] == 1 and planned["report"] == 1, planned
    workflow.run()
    export = workflow.directory / "results" / "export" / "base"
    description = read_description(export)
    assert description["run"]["run_id"] == "base" and (export / description["weights"]["file"]).is_file()
    page = (workflow.directory / "results" / "report" / "report.html").read_text()
    assert '<a href="../export/base/model.json">base: exported model (snakeddp.load)</a>' in page
    assert workflow.planned_jobs() == {}
    # Off again: only the report is redone (without the link); the export stays where it is.
    workflow.write_config(tiny_config)
    assert workflow.planned_jobs() == {"report": 1, "all": 1}
