"""Current runs (the config's) and history, as `snakeddp runs` and the report tell them."""

from __future__ import annotations

from types import SimpleNamespace

import yaml

from snakeddp.run import current


def write(path, config):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_the_flags_snakemake_was_given_plan_the_current_runs(tmp_path):
    write(tmp_path / current.CONFIG_FILE, {"sweep": {"launch.devices": [1, 2]}})
    assert current.from_command_line(tmp_path, [], []) == ["devices-1", "devices-2"]
    mine = write(tmp_path / "my-sweep.yaml", {"sweep": {"seed": [1, 2], "model.lr": [0.1]}})
    assert current.from_command_line(tmp_path, [mine], []) == ["lr-0.1_seed-1", "lr-0.1_seed-2"]
    assert current.from_command_line(tmp_path, [mine], ["sweep={seed: [3]}", "experiment=again"]) == ["again--seed-3"]


def test_without_any_config_file_nothing_is_known_and_a_configfile_alone_is_enough(tmp_path):
    assert current.from_command_line(tmp_path, [], []) is None
    mine = write(tmp_path / "elsewhere" / "config.yaml", {"sweep": {"seed": [5]}})
    assert current.from_command_line(tmp_path, [mine], []) == ["seed-5"]


def test_split_keeps_the_configs_order_and_sends_the_rest_to_history():
    runs = [SimpleNamespace(run_id=rid) for rid in ("devices-2", "old", "devices-1")]
    now, history = current.split(runs, ["devices-1", "devices-2", "not-finished"])
    assert [run.run_id for run in now] == ["devices-1", "devices-2"]
    assert [run.run_id for run in history] == ["old"]
