"""Environment records of this interpreter are captured again when its packages change."""

from __future__ import annotations

import json
import sys

from snakeddp.environment.lock import installed
from snakeddp.workflow.envrecords import differences, made_here, refresh


def record(path, packages, executable=sys.executable):
    path.write_text(json.dumps({"packages": packages, "versions": {"executable": executable}}))
    return path


def test_differences_count_added_removed_and_changed_packages():
    assert differences({"packages": {"a": "1", "b": "2"}}, {"a": "1", "b": "3", "c": "1"}) == 2
    assert differences({"packages": {"a": "1"}}, {"a": "1"}) == 0


def test_only_records_of_this_interpreter_are_compared(tmp_path):
    assert made_here({"versions": {"executable": sys.executable}})
    assert not made_here({"versions": {"executable": "/opt/conda/envs/train/bin/python"}})
    assert not made_here({})
    elsewhere = record(tmp_path / "train.json", {"ghost": "1.0"}, "/opt/conda/envs/train/bin/python")
    assert refresh([elsewhere], remove=True) == [] and elsewhere.is_file()


def test_a_stale_record_is_named_and_removed_only_by_a_run_that_executes_jobs(tmp_path):
    now = {key: pin.version for key, pin in installed().items()}
    fresh = record(tmp_path / "data.json", now)
    stale = record(tmp_path / "train.json", {**now, "ghost-package": "1.0"})
    missing = tmp_path / "report.json"
    assert refresh([fresh, stale, missing], remove=False) == [
        f"environment: 1 package(s) changed since {stale} was recorded; a run records it again"
    ]
    assert stale.is_file()
    assert refresh([fresh, stale, missing], remove=True) == [
        f"environment: 1 package(s) changed since {stale} was recorded: recording it again"
    ]
    assert not stale.is_file() and fresh.is_file()


def test_a_file_that_is_not_a_record_is_left_alone(tmp_path):
    """`snakemake --touch` leaves empty files where records would be: not a reason to stop the workflow."""
    empty, listed = tmp_path / "train.json", tmp_path / "data.json"
    empty.write_text("")
    listed.write_text("[1, 2]")
    assert refresh([empty, listed], remove=True) == []
    assert empty.exists() and listed.exists()
