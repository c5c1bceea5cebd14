"""A finished run's record rewritten by someone else: the report refuses it in one line, writes nothing
outside results/, and moving the run away as the HINT says trains it again."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from snakeddp.provenance.verify import verify_run
from snakeddp.run.runs import load_run
from tests.helpers import Workflow, subprocess_env

# dev_venv: its runs are verified in this process.
pytestmark = [pytest.mark.e2e, pytest.mark.dev_venv, pytest.mark.usefixtures("kept_warm")]

RUN = "results/runs/base"


def hint_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "HINT:" in line]


def snakemake(workflow: Workflow) -> subprocess.CompletedProcess:
    """The real CLI, without the harness's own check that every record matches the schema."""
    return subprocess.run(
        workflow.command(), cwd=workflow.directory, env=subprocess_env(), capture_output=True, text=True, timeout=600
    )


def test_a_rewritten_record_is_refused_by_the_report_and_moving_the_run_away_trains_it_again(
    workflow: Workflow, tiny_config
):
    workflow.write_config(tiny_config)
    workflow.run()
    record_path = workflow.directory / RUN / "provenance.json"
    original = record_path.read_text()
    outside = workflow.directory.parent / f"{workflow.directory.name}-escaped"

    tampered = json.loads(original)
    tampered["training"]["last_checkpoint"]["path"] = f"../../../../{outside.name}/last.ckpt"
    record_path.write_text(json.dumps(tampered))
    done = snakemake(workflow)
    assert done.returncode != 0
    (line,) = [line for line in done.stderr.splitlines() if "does not match provenance.schema.json" in line]
    assert "training.last_checkpoint" in line and line.count("HINT:") == 1, "one line, as every refusal"
    assert not outside.exists()
    assert not verify_run(load_run(workflow.directory / RUN))[0].ok  # the schema check names it

    tampered = json.loads(original)
    tampered["data"]["manifest"] = "/etc/hostname"
    record_path.write_text(json.dumps(tampered))
    done = snakemake(workflow)
    assert done.returncode != 0
    (line,) = [line for line in hint_lines(done.stdout + done.stderr) if "snakeddp report" in line]
    assert "'/etc/hostname', which is not inside the workflow's directory" in line
    assert "move " in line and "out of results/ and rerun snakemake" in line
    manifest_check = next(c for c in verify_run(load_run(workflow.directory / RUN)) if c.kind == "manifest")
    assert not manifest_check.ok and "not inside" in manifest_check.detail

    # The HINT: move the run out of results/ and rerun snakemake.
    shutil.move(workflow.directory / RUN, workflow.directory / "moved-away")
    workflow.run()
    assert json.loads(record_path.read_text())["data"]["manifest"] != "/etc/hostname"
    checks = verify_run(load_run(workflow.directory / RUN))
    assert {check.kind for check in checks} >= {"manifest"} and all(check.ok for check in checks), checks
