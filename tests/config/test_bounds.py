"""snakeddp.config.bounds: configs too large, too deep or too wide are refused before anything walks them."""

from __future__ import annotations

import copy

import pytest

from snakeddp import config
from snakeddp.config import bounds
from snakeddp.util import yamltext
from tests.helpers import TINY, alias_bomb


@pytest.mark.parametrize("levels", [4, 9])
def test_nested_aliases_are_refused_by_count_not_walked(levels):
    document = yamltext.safe_load(alias_bomb(levels))
    assert len(alias_bomb(levels)) < 1000
    with pytest.raises(config.ConfigError, match=r"more than 50000 values once YAML aliases .* HINT:"):
        config.validate(document)


def test_an_alias_used_a_few_times_is_fine():
    text = "x: &hidden [16, 16]\nmodel: {hidden_sizes: *hidden}\nsweep: {model.hidden_sizes: [*hidden]}"
    document = yamltext.safe_load(text)
    document.pop("x")
    assert config.validate(document)["model"]["hidden_sizes"] == [16, 16]


def test_deep_nesting_is_refused_with_the_path_that_nests():
    deep: dict = {}
    inner = deep
    for _ in range(450):
        inner["k"] = {}
        inner = inner["k"]
    with pytest.raises(config.ConfigError, match=r"model\.kwargs\.k\.k\.\.\. nests deeper than 32 levels\. HINT:"):
        config.validate({"model": {"kwargs": deep}})


def test_a_sweep_past_the_run_limit_is_refused_before_any_point_is_built():
    cfg = config.validate({**copy.deepcopy(TINY), "sweep": {"seed": list(range(200)), "model.lr": [0.1] * 51}})
    with pytest.raises(config.ConfigError, match=r"the sweep makes 10200 runs \(seed \(200\) x model.lr \(51\)\)"):
        config.expand_sweep(cfg)


def test_a_run_config_too_large_for_the_command_line_names_the_run_and_key():
    big = {**copy.deepcopy(TINY), "model": {"target": "m:M", "kwargs": {"table": list(range(20_000))}}}
    too_large = r"run base: its config is \d+ KiB \(most of it under 'model'\).*HINT:"
    with pytest.raises(config.ConfigError, match=too_large):
        config.expand_sweep(config.validate(big))
    small = {**copy.deepcopy(TINY), "model": {"target": "m:M", "kwargs": {"table": list(range(100))}}}
    assert list(config.expand_sweep(config.validate(small))) == ["base"]


def test_a_long_value_in_an_error_is_shortened_to_one_readable_line():
    with pytest.raises(config.ConfigError) as error:
        config.validate({"model": {"hidden_sizes": "x" * 5000}})
    line = next(line for line in str(error.value).splitlines() if "hidden_sizes" in line)
    assert "(5002 characters)" in line and len(line) < 300


def test_limits_sit_far_above_the_shipped_config():
    from tests.helpers import REPO

    shipped = yamltext.safe_load((REPO / "config" / "config.yaml").read_text())
    bounds.check_shape(shipped)
    assert sum(1 for _ in _values(shipped)) * 20 < bounds.MAX_VALUES


def _values(value):
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from _values(item)
    elif isinstance(value, list):
        for item in value:
            yield from _values(item)


def test_a_partition_count_past_what_a_plan_can_name_is_refused_before_anything_walks_it():
    """100,000,000 partitions: a dry run that named them ran the machine out of memory."""
    from snakeddp import config

    with pytest.raises(
        config.ConfigError, match=r"data.num_train_files: 100000000 is greater than the maximum of 10000"
    ):
        config.validate({"data": {"num_train_files": 100_000_000}})
