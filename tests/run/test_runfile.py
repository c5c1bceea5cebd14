"""run.yaml: what it holds when only scheduler requests change."""

import json

from snakeddp import config as configuration
from snakeddp.run.runfile import RunFile, keep_scheduler_requests


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
