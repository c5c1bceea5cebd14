"""A rule's JSON parameter: Snakemake records its text, the command carries a checked file."""

import json
import pickle

import pytest
import yaml
from snakemake.persistence import PersistenceBase
from snakemake.utils import QuotedFormatter

from snakeddp import steps
from snakeddp.errors import ConfigError
from snakeddp.workflow.paramfile import param_file, read

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
