"""snakeddp compare: the differences between two runs, section by section."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from snakeddp import config as configuration
from snakeddp.cli import main
from snakeddp.report.compare import compare, format_comparison, user_code_differences
from snakeddp.run import tries
from snakeddp.run.runs import load_run, resolve_run
from snakeddp.util.numbers import readable
from tests.helpers import TINY, write_dataset
from tests.report.test_configurations import write_run


@pytest.mark.e2e
def test_sweep_runs_differ_in_devices_only(sweep_workflow, capsys):
    results = sweep_workflow.directory / "results"
    assert main(["compare", "devices-1", "devices-2", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "config: 1 difference(s)\n  launch.devices  A: 1  B: 2" in out
    for same in ("code: same", "data: same", "environment: same", "packages: same"):
        assert same in out
    assert "world_size" in out and "best score" in out and "val_loss at best epoch" in out
    # samples/s as the runs table shows them (four digits, whole with thousands separators from 10,000), scores to
    # six digits.
    shown = {
        row[0]: row[1:]
        for row in compare(*(load_run(results / "runs" / r) for r in ("devices-1", "devices-2")))["outcome"]
    }
    rates, scores = shown["samples/s"], shown["best score"]
    assert all(readable(rate) in out for rate in rates) and all(f"{score:.6g}" in out for score in scores), out


@pytest.mark.e2e
def test_edited_runs_show_code_data_and_package_differences(sweep_workflow, tmp_path):
    """A copy of one run whose record says it came from another commit, dataset and environment."""
    source = sweep_workflow.directory / "results/runs/devices-1"
    other = tmp_path / "runs/other"
    shutil.copytree(source, other)
    record = json.loads((other / "provenance.json").read_text())
    record["code"].update(commit="0" * 40, dirty=not record["code"]["dirty"])
    record["data"].update(manifest_sha256="f" * 64, dataset="synthetic-0000000000")
    record["config"]["model"]["lr"] = 0.1
    packages = record["environment"]["packages"]
    torch_version = packages["torch"]
    packages["torch"] = "9.9.9"
    packages["brand-new"] = "1.0"
    del packages["pyyaml"]
    (other / "provenance.json").write_text(json.dumps(record))
    result = compare(resolve_run(str(source)), load_run(other))
    assert ["model.lr", 0.003, 0.1] in result["config"]
    assert [row[0] for row in result["code"]] == ["commit", "dirty"]
    # The user's model file, outside version control where commit and dirty flag cannot see it.
    entry = {"role": "model", "file": "byo/net.py", "sha256": "a" * 64, "target": "byo.net:Net"}
    record["code"] = json.loads((source / "provenance.json").read_text())["code"]
    (other / "provenance.json").write_text(json.dumps({**record, "user_code": [entry]}))
    edited = compare(resolve_run(str(source)), load_run(other))["code"]
    assert edited == [["model code", "(absent)", f"byo/net.py sha256 {'a' * 16}"]]
    assert {row[0] for row in result["data"]} == {"dataset", "manifest_sha256"}
    assert result["packages"]["added"] == [["brand-new", "1.0"]]
    assert result["packages"]["removed"][0][0] == "pyyaml"
    assert result["packages"]["changed"] == [["torch", torch_version, "9.9.9"]]


@pytest.mark.e2e
def test_json_output_and_unknown_run(sweep_workflow, capsys):
    results = str(sweep_workflow.directory / "results")
    assert main(["compare", "devices-2", "devices-1", "--json", "--results", results]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"] == ["devices-2", "devices-1"] and data["config"] == [["launch.devices", 2, 1]]
    assert main(["compare", "devices-1", "nope", "--results", results]) == 2
    assert "'nope' is not a run id" in capsys.readouterr().err


def test_missing_path_is_named(tmp_path: Path):
    with pytest.raises(LookupError, match="no finished runs"):
        resolve_run("x", tmp_path)


def test_model_files_that_differ_are_a_code_difference_even_where_the_commit_is_the_same():
    """byo/digits_model.py, untracked beside the config, changed between two runs: compare said 'code: same'."""
    commit = {"commit": "1" * 40, "dirty": False}
    a = {"code": commit, "user_code": [{"role": "model", "file": "byo/m.py", "sha256": "c2aa" + "0" * 60}]}
    b = {"code": commit, "user_code": [{"role": "model", "file": "byo/m.py", "sha256": "c453" + "0" * 60}]}
    assert user_code_differences(a, b) == [
        ["model code", f"byo/m.py sha256 c2aa{'0' * 12}", f"byo/m.py sha256 c453{'0' * 12}"]
    ]
    assert user_code_differences(a, a) == [] and user_code_differences({}, {"user_code": None}) == []
    result = {
        "runs": ["a", "b"],
        **{section: [] for section in ("config", "data", "environment", "launch", "outcome")},
        "code": user_code_differences(a, b),
        "packages": {"added": [], "removed": [], "changed": []},
    }
    assert "code: 1 difference(s)\n  model code  A: byo/m.py sha256 c2aa" in format_comparison(result)


def test_the_environment_is_never_same_when_its_packages_differ():
    """Two records whose environment hashes agree although their packages do not (a record not
    captured again after the venv changed) must not read as the same environment."""
    result = {
        "runs": ["a", "b"],
        **{section: [] for section in ("config", "code", "data", "environment", "launch", "outcome")},
        "packages": {"added": [["pytest", "9.0.1"]], "removed": [], "changed": [["torch", "2.13.0", "2.13.1"]]},
    }
    text = format_comparison(result)
    assert "environment: same" not in text and "environment: 2 difference(s)" in text
    assert "environment records' hashes agree" in text and "packages: 2 difference(s)" in text
    result["packages"] = {"added": [], "removed": [], "changed": []}
    assert "environment: same" in format_comparison(result)


def test_the_outcome_reads_as_the_runs_table_with_tries_and_goodput_and_scores_to_six_digits(tmp_path):
    """samples/s to the runs table's four digits (six read 1001.5 where `snakeddp runs` said 1002), and the tries and
    goodput `snakeddp runs` shows; --json keeps the numbers."""
    manifest = write_dataset(tmp_path / "data", configuration.validate(TINY)["data"])
    hung = tries.entry(started=1e9, ended=1e9 + 100, outcome="hung", exit_code=1, launcher="direct", job_id=None,
                       resumed_from=None, saved_now=None, hang=None, placement=None)  # fmt: skip
    a = write_run(tmp_path / "a", manifest, {}, [0.5, 0.4123456, 0.45], [0.9, 0.95, 0.93])
    b = write_run(tmp_path / "b", manifest, {}, [0.5, 0.4123449, 0.45], [0.9, 0.95, 0.93], earlier=(hung,))
    shown = {label: (va, vb) for label, va, vb in compare(a, b, raw=False)["outcome"]}
    assert shown["samples/s"] == ("1002", "1002") and shown["epochs"] == ("3/3", "3/3")
    assert shown["tries"] == ("1", "2") and shown["goodput"][0] == "100%" and shown["goodput"][1].endswith("%")
    assert shown["best score"] == ("0.412346", "0.412345"), "scores that four digits show as equal"
    text = format_comparison(compare(a, b, raw=False))
    assert re.search(r"\n  samples/s +A: 1002  B: 1002\n  tries +A: 1  B: 2\n  goodput +A: 100%  B: \d+%", text), text
    raw = {label: (va, vb) for label, va, vb in compare(a, b)["outcome"]}
    assert raw["samples/s"] == (1001.5, 1001.5) and raw["tries"] == (1, 2) and raw["goodput"][0] == 1.0
