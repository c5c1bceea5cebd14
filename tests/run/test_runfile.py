"""run.yaml: what it holds when only scheduler requests change."""

import json
import subprocess
import sys

import pytest

from snakeddp import config as configuration
from snakeddp.run.runfile import RunFile, keep_scheduler_requests, rewrites
from tests.helpers import subprocess_env


def a_run(**launch):
    cfg = configuration.validate({"launch": {"runtime": 10, "mem_mb": 1000, **launch}})
    return {"point": {}, "config": configuration.run_config(cfg)}


def written(tmp_path, run):
    path = tmp_path / "run.yaml"
    RunFile(run_id="base", config=run["config"], point=run["point"]).write(path)
    return path


def test_raised_runtime_and_memory_leave_run_yaml_as_written(tmp_path):
    path = written(tmp_path, a_run())
    kept = keep_scheduler_requests(a_run(runtime=120, mem_mb=8000), path)
    assert json.dumps(kept, sort_keys=True) == json.dumps(a_run(), sort_keys=True), "the rule's parameter is unchanged"


def test_any_other_change_writes_the_new_run(tmp_path):
    path = written(tmp_path, a_run())
    changed = a_run(runtime=120, devices=2)
    assert keep_scheduler_requests(changed, path) == changed


def test_a_new_or_unreadable_run_yaml_takes_the_config(tmp_path):
    assert keep_scheduler_requests(a_run(), tmp_path / "absent.yaml") == a_run()
    (tmp_path / "bad.yaml").write_text("[not: a run")
    assert keep_scheduler_requests(a_run(), tmp_path / "bad.yaml") == a_run()


def test_column_names_in_any_script_are_written_as_they_read_and_read_back_whatever_the_locale(tmp_path):
    features = ["température", "重量"]
    table = {"path": "t.csv", "features": features, "label": "ÿ"}
    cfg = configuration.validate({"data": {"source": "table", "table": table}})
    run = {"point": {}, "config": configuration.run_config(cfg)}
    path = written(tmp_path, run)
    text = path.read_bytes().decode("utf-8")
    assert "- température\n" in text and "- 重量\n" in text and "\\x" not in text and "\\u" not in text
    # A rank on a host whose locale is not UTF-8 (C, neither coerced nor in UTF-8 mode: ASCII) reads the same run.
    reader = (
        "import sys; from snakeddp.run.runfile import RunFile; "
        f"print(RunFile.load(sys.argv[1]).config['data']['table']['features'] == {features!a})"
    )
    env = {**subprocess_env(), "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    done = subprocess.run([sys.executable, "-c", reader, str(path)], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "True", done.stderr


def test_a_run_file_is_rewritten_when_absent_unreadable_or_another_config_and_not_for_scheduler_requests(tmp_path):
    path = written(tmp_path, a_run())
    assert not rewrites(a_run(), path)
    assert not rewrites(a_run(runtime=120, mem_mb=8000), path), "scheduler requests keep run.yaml"
    assert rewrites(a_run(devices=2), path)
    assert rewrites(a_run(), tmp_path / "absent.yaml")
    for text in ("format: snakeddp-run/1\nconfig: {}\n", "- a list\n", "[not: a run"):
        path.write_text(text)
        assert rewrites(a_run(), path), text


def test_a_run_file_whose_config_says_other_than_its_sweep_point_is_refused_and_rewritten_as_hinted(tmp_path):
    """model.lr edited by hand in sw--lr-0.01's run.yaml: it would train 0.5 under 0.01's name, and its record
    and the report would say so."""
    from snakeddp import config
    from snakeddp.config import ConfigError

    (run,) = [r for r in config.expand_sweep(config.validate({"sweep": {"model.lr": [0.01]}})).values()]
    path = tmp_path / "run.yaml"
    RunFile(run_id="lr-0.01", config=run["config"], point=run["point"]).write(path)
    path.write_text(path.read_text().replace("\n    lr: 0.01", "\n    lr: 0.5"))  # the config's, not the point's
    with pytest.raises(ConfigError) as refused:
        RunFile.load(path)
    line = str(refused.value)
    assert "its config has model.lr: 0.5, and its sweep point (and run id) says 0.01" in line, line
    assert f"HINT: delete it (rm {path})" in line
    assert rewrites(run, path), "the plan writes it anew"
    path.unlink()  # as hinted; the workflow's run_config job writes it again
    RunFile(run_id="lr-0.01", config=run["config"], point=run["point"]).write(path)
    assert RunFile.load(path).config["model"]["lr"] == 0.01
