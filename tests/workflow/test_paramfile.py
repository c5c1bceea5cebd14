"""A rule's JSON parameter: Snakemake records its text, the command carries a checked file."""

import json
import pickle
from types import SimpleNamespace

import pytest
import yaml
from snakemake.persistence import PersistenceBase
from snakemake.utils import QuotedFormatter

from snakeddp import steps
from snakeddp.errors import ConfigError, TableError
from snakeddp.workflow.paramfile import param_file, read
from snakeddp.workflow.plan import Plan
from tests import tables

RUN = {"point": {"model.lr": 0.1}, "config": {"model": {"lr": 0.1, "note": "it's a $(test)"}, "trainer": {}}}


def test_snakemake_records_the_json_and_formats_the_path_of_a_file_holding_it(tmp_path):
    text = json.dumps(RUN, sort_keys=True)
    param = param_file(text, tmp_path)
    # What .snakemake/metadata held when the JSON was the argument: finished pipelines keep their key.
    assert PersistenceBase._serialize_param_builtin(None, param) == repr(text)
    assert QuotedFormatter().format("--run {p:q}", p=param) == f"--run {param.path}"
    assert param.path.parent == tmp_path and param.path.read_text() == text and read(param.path) == RUN
    assert pickle.loads(pickle.dumps(param)).path == param.path
    written = param.path.stat()
    assert param_file(text, tmp_path).path.stat().st_mtime_ns == written.st_mtime_ns  # never rewritten
    assert param_file(json.dumps({**RUN, "point": {}}), tmp_path).path != param.path


def test_a_parameter_file_changed_after_planning_is_refused_and_its_hint_replans_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    param = param_file(json.dumps(RUN, sort_keys=True))
    param.path.write_text(param.replace("0.1", "0.9"))
    out = tmp_path / "results" / "runs" / "base" / "run.yaml"
    argv = ["run-config", "--run-id", "base", "--run", format(param), "--out", str(out)]
    with pytest.raises(ConfigError) as refused:
        steps.main(argv)
    message = str(refused.value)
    assert "is not the parameter it was planned with" in message and "\n" not in message and not out.exists()
    # The HINT: delete it and run snakemake again, whose planning writes it (param_file).
    command = message.split("HINT: delete it (")[1].split(")")[0]
    assert command == f"rm {param.path}"
    param.path.unlink()
    param_file(json.dumps(RUN, sort_keys=True))
    steps.main(argv)
    assert yaml.safe_load(out.read_text())["config"] == RUN["config"]


def test_a_file_not_named_by_its_sha256_is_refused(tmp_path):
    stray = tmp_path / "run.json"
    stray.write_text(json.dumps(RUN))
    with pytest.raises(ConfigError, match=r"its sha256 is not its name\)\. HINT: delete it"):
        read(stray)
    with pytest.raises(ConfigError, match=r"cannot read this planned parameter file .* HINT: run snakemake again"):
        read(tmp_path / ("0" * 64 + ".json"))


def test_a_data_rules_command_carries_its_dataset_as_a_file_which_the_step_reads(tmp_path, monkeypatch):
    """A failed data_table job's "shell:" line held the dataset's whole JSON (a table's every feature named: hundreds
    of columns); it shows a file's path, the step's own line says what failed, and Snakemake's key stays the JSON."""
    monkeypatch.chdir(tmp_path)
    table = tmp_path / "t.csv"
    table.write_text("x,y\n1,0\noops,1\n")
    data = tables.params(table, partitions=1, format="csv", features=["x"])
    param = Plan.dataset_params_json(SimpleNamespace(dataset_params=lambda wildcards: data), None)
    shell = QuotedFormatter().format("python -m snakeddp.steps ingest --params {data:q} --out out", data=param)
    assert shell == f"python -m snakeddp.steps ingest --params {param.path} --out out" and "t.csv" not in shell
    assert PersistenceBase._serialize_param_builtin(None, param) == repr(json.dumps(data, sort_keys=True))
    with pytest.raises(TableError, match=r"t\.csv: column 'x', .*'oops' is not a number\. HINT: "):
        steps.main(["ingest", "--params", format(param), "--out", str(tmp_path / "out")])
    with pytest.raises(TableError, match=r"'oops' is not a number"):  # JSON typed by hand, as before
        steps.main(["ingest", "--params", json.dumps(data), "--out", str(tmp_path / "out")])
