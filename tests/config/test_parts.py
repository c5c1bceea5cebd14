"""snakeddp.config.parts: every schema key of a part's section has a field of the right shape, parts are
built from validated configs and run configs alike, and stay frozen."""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

import pytest

from snakeddp import config, platforms
from snakeddp.config import lightningcli, parts
from snakeddp.config import schema as config_schema
from snakeddp.config.schema import load_schema
from snakeddp.errors import ConfigError
from tests.helpers import TINY

# Keys whose enumeration the registry assembles (snakeddp.config.schema): no field's Literal can close the list.
REGISTERED = {"launch.launcher"}


def enumerated(schema: Mapping[str, Any]) -> set[Any] | None:
    """The values a schema key is held to (its enum or const, its anyOf branches' with null), or None: no
    enumeration (any value of its type)."""
    if "enum" in schema:
        return set(schema["enum"])
    if "const" in schema:
        return {schema["const"]}
    branches = schema.get("anyOf", [])
    held = [values for values in map(enumerated, branches) if values is not None]
    if not held:
        return None
    return set().union(*held) | ({None} if any(branch.get("type") == "null" for branch in branches) else set())


def literals(hint: Any) -> set[Any] | None:
    """The values a field's type names (its Literal's, and None where it is optional), or None: no Literal."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return set(typing.get_args(hint))
    if origin not in (typing.Union, types.UnionType):
        return None
    held = [values for values in map(literals, typing.get_args(hint)) if values is not None]
    if not held:
        return None
    return set().union(*held) | ({None} if type(None) in typing.get_args(hint) else set())


def mismatches(part: type[parts.Part], schema: Mapping[str, Any]) -> list[str]:
    """Where a part and its section's schema disagree: a key without a field, a field without a key, a
    nested object whose field is not a nested part, a free-form map or array held otherwise, an enumeration
    (enum, const) that is not the field's Literal, or a Literal the schema does not hold to."""
    keys, hints = dict(schema["properties"]), typing.get_type_hints(part)
    if part.key in lightningcli.OURS:  # LightningCLI's spelling, rewritten to ours before validation
        keys = {
            key: value for key, value in keys.items() if key not in (lightningcli.CLASS_PATH, lightningcli.INIT_ARGS)
        }
    names = [f.name for f in dataclasses.fields(part)]
    found = [f"{part.key}.{key}: no field" for key in keys if key not in names]
    found += [f"{part.key}.{name}: no schema key" for name in names if name not in keys]
    for key in [key for key in keys if key in names]:  # in the schema's order, so the findings are too
        hint, origin = hints[key], typing.get_origin(hints[key])
        if "properties" in keys[key]:
            if not (isinstance(hint, type) and issubclass(hint, parts.Part) and hint.key == f"{part.key}.{key}"):
                found.append(f"{part.key}.{key}: a nested object, and its field is no part of that key")
            else:
                found += mismatches(hint, keys[key])
        elif keys[key].get("type") == "object" and origin is not Mapping:
            found.append(f"{part.key}.{key}: a free-form map, and its field is no Mapping")
        elif keys[key].get("type") == "array" and origin is not tuple:
            found.append(f"{part.key}.{key}: an array, and its field is no tuple")
        if f"{part.key}.{key}" in REGISTERED:
            continue
        array = keys[key].get("type") == "array" and origin is tuple
        allowed = enumerated(keys[key].get("items", {}) if array else keys[key])
        typed = literals(typing.get_args(hint)[0] if array else hint)
        if allowed != typed:
            shown = [None if values is None else sorted(values, key=repr) for values in (allowed, typed)]
            found.append(f"{part.key}.{key}: the schema allows {shown[0]}, its field's Literal {shown[1]}")
    return found


@pytest.mark.parametrize("part", parts.SECTIONS, ids=lambda part: part.key)
def test_every_schema_key_of_a_section_is_a_field_of_its_part(part):
    assert mismatches(part, load_schema()["properties"][part.key]) == []


@pytest.mark.parametrize("row", [row for row in platforms.rows() if row.section], ids=lambda row: row.name)
def test_every_key_of_a_platforms_section_is_a_field_of_its_settings_part(row):
    """A platform's section is its package's part (parts.Settings), held to the schema it brings as the
    config's parts are to theirs."""
    part = config_schema.settings_part(row)
    assert issubclass(part, parts.Settings) and part.key == row.section
    assert load_schema()["properties"][row.section] == part.schema()
    assert mismatches(part, part.schema()) == []


def test_the_launchers_are_the_schema_files_and_each_platforms_own():
    launcher = load_schema()["properties"]["launch"]["properties"]["launcher"]["enum"]
    own = [name for row in platforms.rows() for name in row.own_launchers]
    assert launcher == ["auto", "direct", "torchrun", "mpirun", *dict.fromkeys(own)]
    assert parts.Launch.of({**config.validate({})["launch"], "launcher": "srun"}).launcher == "srun"


def test_the_key_check_fails_for_a_schema_key_without_a_field_and_for_a_misshapen_one():
    schema = copy.deepcopy(load_schema()["properties"])
    schema["launch"]["properties"]["gpus_per_node"] = {"type": "integer", "default": 1}
    schema["trainer"]["properties"]["monitor"]["properties"]["every"] = {"type": "integer", "default": 1}
    schema["data"]["properties"]["seed"] = {"type": "array", "default": []}
    assert mismatches(parts.Launch, schema["launch"]) == ["launch.gpus_per_node: no field"]
    assert mismatches(parts.Trainer, schema["trainer"]) == ["trainer.monitor.every: no field"]
    assert mismatches(parts.Data, schema["data"]) == ["data.seed: an array, and its field is no tuple"]


def test_the_key_check_fails_for_an_enumeration_that_is_not_its_fields_literal():
    schema = copy.deepcopy(load_schema()["properties"])
    schema["trainer"]["properties"]["precision"]["enum"].append("64-true")
    schema["trainer"]["properties"]["preempt_signals"]["items"]["enum"].remove("SIGUSR2")
    schema["site"]["properties"]["accelerator"]["enum"].remove(None)
    schema["data"]["properties"]["seed"]["enum"] = [1, 2]
    del schema["launch"]["properties"]["hang_timeout"]["anyOf"][0]  # the const auto
    assert mismatches(parts.Trainer, schema["trainer"]) == [
        "trainer.precision: the schema allows ['16-mixed', '32-true', '64-true', 'bf16-mixed'], its field's Literal "
        "['16-mixed', '32-true', 'bf16-mixed']",
        "trainer.preempt_signals: the schema allows ['SIGTERM', 'SIGUSR1'], its field's Literal "
        "['SIGTERM', 'SIGUSR1', 'SIGUSR2']",
    ]
    assert mismatches(parts.Site, schema["site"]) == [
        "site.accelerator: the schema allows ['cpu', 'gpu'], its field's Literal ['cpu', 'gpu', None]"
    ]
    assert mismatches(parts.Data, schema["data"]) == ["data.seed: the schema allows [1, 2], its field's Literal None"]
    assert mismatches(parts.Launch, schema["launch"]) == [
        "launch.hang_timeout: the schema allows None, its field's Literal ['auto', None]"
    ]


def test_the_sections_are_the_top_level_parts():
    assert [part.key for part in parts.SECTIONS] == [f.name for f in dataclasses.fields(parts.Parts)]


def test_a_validated_config_gives_every_part_holding_its_values():
    cfg = config.validate({**TINY, "launch": {"devices": 2, "master_port": 29600}, "site": {"accelerator": "gpu"}})
    every = parts.of(cfg)
    assert (every.launch.devices, every.launch.master_port, every.launch.world_size) == (2, 29600, 2)
    assert every.site.accelerator == "gpu" and every.site.cpus_per_gpu == cfg["site"]["cpus_per_gpu"]
    assert every.trainer.early_stopping.patience == cfg["trainer"]["early_stopping"]["patience"]
    assert every.tracking.mlflow.experiment == cfg["tracking"]["mlflow"]["experiment"]
    for part in parts.SECTIONS:
        assert parts.thaw(getattr(every, part.key)) == cfg[part.key], "a part is its section, typed"


def test_a_run_config_gives_its_parts_with_the_keys_it_leaves_out_at_their_schema_default():
    run = config.run_config(config.validate(TINY))
    assert "monitor" not in run["trainer"] and "version" not in run["data"]["table"], "QUIET_AT_DEFAULT"
    trainer, data = parts.Trainer.of(run["trainer"]), parts.Data.of(run["data"])
    defaults = config.defaults()["trainer"]
    assert trainer.monitor == parts.Monitor(**defaults["monitor"])
    assert trainer.deterministic is defaults["deterministic"] is False
    assert trainer.matmul_precision == defaults["matmul_precision"]
    assert data.table.version is None and data.table.table_id is None


def test_parts_are_frozen_down_to_their_free_form_maps():
    cfg = config.validate({**TINY, "trainer": {"strategy_options": {"bucket": [1, {"deep": 2}]}}})
    trainer = parts.Trainer.of(cfg["trainer"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        trainer.max_epochs = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        trainer.strategy_options["bucket"] = 3  # type: ignore[index]
    with pytest.raises(TypeError):
        trainer.strategy_options["bucket"][1]["deep"] = 3
    assert trainer.preempt_signals == tuple(cfg["trainer"]["preempt_signals"])
    assert parts.thaw(trainer.strategy_options) == {"bucket": [1, {"deep": 2}]}
    cfg["trainer"]["strategy_options"]["bucket"].append(4)
    assert parts.thaw(trainer.strategy_options) == {"bucket": [1, {"deep": 2}]}, "a part holds its own copy"


def test_a_section_missing_a_key_is_refused_in_one_line_with_a_hint():
    section = config.validate({})["launch"]
    del section["devices"]
    with pytest.raises(ConfigError, match=r"^launch\.devices is missing.*HINT: .*validated config") as refused:
        parts.Launch.of(section)
    assert "\n" not in str(refused.value)


def test_a_key_no_field_holds_is_refused_in_one_line_with_a_hint():
    section = {**config.validate({})["trainer"]["early_stopping"], "verbose": True}
    with pytest.raises(ConfigError, match=r"^trainer\.early_stopping\.verbose has no field in parts.*HINT"):
        parts.EarlyStopping.of(section)


def test_a_run_config_is_no_full_config():
    with pytest.raises(ConfigError, match=r"no site, tracking section.*HINT: .*parts\.Launch\.of"):
        parts.of(config.run_config(config.validate(TINY)))


def test_a_section_that_is_not_a_mapping_is_refused():
    with pytest.raises(ConfigError, match=r"^launch: expected a mapping.*HINT"):
        parts.Launch.of(["devices"])  # type: ignore[arg-type]
