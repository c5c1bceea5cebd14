"""Config values take the type the schema asks for: --config strings parsed, whole floats made ints."""

from __future__ import annotations

import pytest

from snakeddp.config import ConfigError, coerce, expand_sweep, load_schema, validate


@pytest.fixture(scope="module")
def schema():
    return load_schema()


def test_command_line_strings_take_the_schema_type(schema):
    given = {
        "trainer": {"max_epochs": "3", "early_stopping": {"enabled": "false"}},
        "model": {"lr": "1e-3", "hidden_sizes": ["16", "8"], "kwargs": {"width": "32", "act": "relu"}},
        "launch": {"master_port": "null", "devices": "2.0"},
        "tracking": {"tensorboard": {"enabled": "true"}},
        "sweep": {"model.lr": ["0.001", "0.01"], "launch.devices": ["1", "2"]},
        "environment": {"image": "docker://x/y:1", "lock": "null"},
        "platform": "local",
    }
    assert coerce.command_line(given, schema) == {
        "trainer": {"max_epochs": 3, "early_stopping": {"enabled": False}},
        "model": {"lr": 0.001, "hidden_sizes": [16, 8], "kwargs": {"width": 32, "act": "relu"}},
        "launch": {"master_port": None, "devices": 2},
        "tracking": {"tensorboard": {"enabled": True}},
        "sweep": {"model.lr": [0.001, 0.01], "launch.devices": [1, 2]},
        "environment": {"image": "docker://x/y:1", "lock": None},
        "platform": "local",
    }


def test_a_top_level_name_snakemake_reads_as_a_number_is_its_text(schema):
    """`--config experiment=2026` (or =nan): Snakemake's own parser makes the value a number."""
    from snakemake.cli import parse_config

    typed = parse_config(["experiment=2026", "platform=local"])
    assert validate(coerce.command_line(typed, schema))["experiment"] == "2026"
    typed = parse_config(["experiment=nan"])
    assert validate(coerce.command_line(typed, schema))["experiment"] == "nan"
    assert coerce.command_line({"seed": 3, "model": {"lr": 1}}, schema) == {"seed": 3, "model": {"lr": 1}}


def test_a_string_that_is_not_the_type_is_left_for_the_schema_to_name(schema):
    given = coerce.command_line({"trainer": {"max_epochs": "3.5"}, "model": {"lr": "fast"}}, schema)
    with pytest.raises(ConfigError) as error:
        validate(given)
    assert "trainer.max_epochs: '3.5' is not of type 'integer'" in str(error.value)
    assert "model.lr: 'fast' is not of type 'number'" in str(error.value)


def test_whole_number_floats_become_ints_where_the_schema_says_integer():
    resolved = validate(
        {
            "trainer": {"max_epochs": 2.0},
            "launch": {"threads_per_process": 1.0},
            "model": {"lr": 1.0},
            "data": {"num_train_files": 4.0},
            "sweep": {"launch.devices": [1.0, 2.0]},
        }
    )
    assert resolved["trainer"]["max_epochs"] == 2 and type(resolved["trainer"]["max_epochs"]) is int
    assert type(resolved["launch"]["threads_per_process"]) is int
    assert type(resolved["data"]["num_train_files"]) is int
    assert type(resolved["model"]["lr"]) is float  # a number stays a number
    runs = expand_sweep(resolved)
    assert sorted(runs) == ["devices-1", "devices-2"]
    assert type(runs["devices-2"]["config"]["launch"]["devices"]) is int


def test_a_fractional_float_for_an_integer_is_an_error():
    with pytest.raises(ConfigError, match=r"launch.devices: 1.5 is not of type 'integer'"):
        validate({"launch": {"devices": 1.5}})
