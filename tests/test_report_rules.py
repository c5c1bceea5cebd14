"""The report stage in the workflow: outputs, reruns and Snakemake's own report."""

from __future__ import annotations

import zipfile

import pytest
import yaml

from tests.helpers import SWEEP, Workflow

pytestmark = pytest.mark.e2e
REPORT_RULES = {"report_curves", "report_scaling", "report_html", "report_crate"}


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
    assert set(planned) - {"all"} == REPORT_RULES, planned


def test_bad_report_setting_names_the_key(sweep_workflow):
    flow = Workflow(sweep_workflow.directory)
    flow.configfile = sweep_workflow.directory / "config-bad.yaml"
    flow.write_config({**SWEEP, "report": {"metrics": ["val_los"]}})
    done = flow.run("--dry-run", check=False)
    assert done.returncode != 0 and "report.metrics.0" in done.stdout + done.stderr


def test_snakemake_report_includes_ours(sweep_workflow, tmp_path):
    target = tmp_path / "snakemake-report.zip"
    sweep_workflow.run("--report", str(target))
    names = zipfile.ZipFile(target).namelist()
    assert any(name.endswith("report.html") and "/data/raw/" in name for name in names), names[:20]
    assert any(name.endswith("curves.png") for name in names)
    assert yaml.safe_load((sweep_workflow.directory / "config.yaml").read_text()) == SWEEP
