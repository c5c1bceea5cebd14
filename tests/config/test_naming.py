"""Run ids: one canonical order of a point's keys, an experiment's name in front."""

from __future__ import annotations

import re

import pytest

from snakeddp import config
from snakeddp.config import naming
from snakeddp.run.layout import RUN_ID_MAX, RUN_ID_PATTERN
from snakeddp.workflow.preflight import check_run_ids

GRID = {"seed": [1, 2], "model.lr": [0.01, 0.003], "trainer.batch_size": [16]}


def test_a_reordered_sweep_plans_the_same_runs_in_the_same_order_with_the_same_points():
    forward = config.expand_sweep(config.validate({"sweep": GRID}))
    backward = config.expand_sweep(config.validate({"sweep": dict(reversed(GRID.items()))}))
    assert (
        list(forward)
        == list(backward)
        == [
            "lr-0.01_batch_size-16_seed-1",
            "lr-0.01_batch_size-16_seed-2",
            "lr-0.003_batch_size-16_seed-1",
            "lr-0.003_batch_size-16_seed-2",
        ]
    )
    assert [list(run["point"]) for run in forward.values()] == [list(run["point"]) for run in backward.values()]
    assert forward == backward


def test_keys_follow_the_schema_with_the_seed_last_and_unlisted_keys_after_their_parent_by_name():
    keys = ["seed", "launch.devices", "model.kwargs.width", "model.kwargs.depth", "model.lr", "data.seed"]
    ordered = naming.canonical(keys)
    assert ordered[0] == "data.seed" and ordered[-2:] == ["launch.devices", "seed"]
    model = [key for key in ordered if key.startswith("model.")]
    schema_model = list(config.load_schema()["properties"]["model"]["properties"])
    assert schema_model.index("kwargs") < schema_model.index("lr") and model == [
        "model.kwargs.depth",
        "model.kwargs.width",
        "model.lr",
    ]


def test_ids_already_in_canonical_order_keep_their_names():
    assert list(config.expand_sweep(config.validate({"sweep": {"launch.devices": [1, 2]}}))) == [
        "devices-1",
        "devices-2",
    ]
    assert config.run_id({"model.lr": 0.01, "launch.devices": 2}) == "lr-0.01_devices-2"
    assert config.run_id({}) == "base"


def test_an_experiment_name_starts_every_run_id_and_changes_no_run_config():
    plain = config.expand_sweep(config.validate({"sweep": {"launch.devices": [1, 2]}}))
    named = config.expand_sweep(config.validate({"experiment": "ddp-check", "sweep": {"launch.devices": [1, 2]}}))
    assert list(named) == ["ddp-check--devices-1", "ddp-check--devices-2"]
    assert [run["config"] for run in named.values()] == [run["config"] for run in plain.values()]
    assert list(config.expand_sweep(config.validate({"experiment": "solo"}))) == ["solo--base"]
    check_run_ids(named)  # a name Snakemake takes for the run wildcard


@pytest.mark.parametrize("name", ["lr search", "a--b", "-lead", "trail-", "x" * 65, "dir/name"])
def test_a_bad_experiment_name_is_one_line_with_a_hint_and_the_names_it_suggests_work(name):
    with pytest.raises(config.ConfigError) as caught:
        config.validate({"experiment": name})
    (line,) = [line for line in str(caught.value).splitlines() if line.strip().startswith("experiment:")]
    assert "HINT: name it with letters and digits" in line
    for suggested in re.findall(r"\((\S+), (\S+)\)", line)[0]:
        (rid,) = config.expand_sweep(config.validate({"experiment": suggested}))
        assert re.fullmatch(RUN_ID_PATTERN, rid) and rid.startswith(f"{suggested}--")


def test_the_longest_experiment_name_leaves_room_in_a_run_id():
    longest = "e" * config.load_schema()["properties"]["experiment"]["maxLength"]
    (rid,) = config.expand_sweep(config.validate({"experiment": longest}))
    assert len(rid) < RUN_ID_MAX
