"""Give config values the types the schema asks for, before the schema checks them.

Two sources send values of the wrong type that mean the right thing:

- ``snakemake --config trainer='{max_epochs: 3}'``: Snakemake parses nested command-line values
  with YAML's BaseLoader, so every scalar inside arrives as a string ('3').
- YAML written by hand or by tools: ``max_epochs: 2.0`` is a valid JSON Schema integer, but a
  float would reach torchrun (``--nproc-per-node=2.0``) and run ids (``devices-2.0``).

``command_line`` parses the strings of --config by the type each key asks for; ``normalise``
turns whole-number floats into ints wherever the schema says integer. A value that still does
not fit is left as it is, so the schema names the key, the value and the type it expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from snakeddp.util import yamltext

# The sweep maps dotted keys to lists of values of that key's type.
SWEEP = "sweep"
# What a command-line value may say for null where the schema allows it.
NULLS = ("null", "~", "none", "None")
BOOLEANS = {"true": True, "false": False}


def _types(schema: Mapping[str, Any]) -> set[str]:
    declared = schema.get("type")
    if declared is not None:
        return {declared} if isinstance(declared, str) else set(declared)
    if "enum" in schema:
        return {"string" if isinstance(v, str) else "null" if v is None else "number" for v in schema["enum"]}
    return set()


def subschema(schema: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The schema of a dotted key (``model.lr``); ``{}`` (anything) below free-form sections."""
    node: Mapping[str, Any] = schema
    for part in key.split("."):
        properties = node.get("properties", {})
        if part in properties:
            node = properties[part]
        elif isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
        else:
            return {}
    return dict(node)


def _parse_text(text: str, types: set[str]) -> Any:
    """A command-line scalar as the first of ``types`` it can be; ``text`` when none fits."""
    if "null" in types and text in NULLS:
        return None
    if "string" in types:
        return text
    if "boolean" in types and text.lower() in BOOLEANS:
        return BOOLEANS[text.lower()]
    if types & {"integer", "number"}:
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            if "integer" in types and number.is_integer() and ("number" not in types or "." not in text):
                return int(number)
            if "number" in types:
                return number
    if not types:  # a free-form value (model.kwargs): read it as a config file would
        try:
            parsed = yamltext.safe_load(text)
        except yaml.YAMLError:
            return text
        if isinstance(parsed, str):
            try:
                return float(parsed)  # YAML 1.1 reads 1e-3 as a string
            except ValueError:
                return parsed
        return parsed
    return text


def _coerce(value: Any, schema: Mapping[str, Any], text: bool) -> Any:
    types = _types(schema)
    if isinstance(value, Mapping):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {
            key: _coerce(item, properties.get(key, extra if isinstance(extra, Mapping) else {}), text)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_coerce(item, schema.get("items", {}), text) for item in value]
    if isinstance(value, str) and text:
        return _parse_text(value, types)
    if text and type(value) in (int, float) and "string" in types and not types & {"integer", "number"}:
        # Snakemake reads a top-level `--config experiment=2026` (or =nan) as a number: the key wants its text.
        return str(value)
    if isinstance(value, float) and value.is_integer() and "integer" in types and "number" not in types:
        return int(value)
    return value


def _coerce_config(config: Mapping[str, Any], schema: Mapping[str, Any], text: bool) -> dict[str, Any]:
    coerced = _coerce({k: v for k, v in config.items() if k != SWEEP}, schema, text)
    sweep = config.get(SWEEP)
    if isinstance(sweep, Mapping):
        coerced[SWEEP] = {
            key: _coerce(values, {"items": subschema(schema, key)}, text) if isinstance(values, list) else values
            for key, values in sweep.items()
        }
    elif SWEEP in config:
        coerced[SWEEP] = sweep
    return coerced


def command_line(overrides: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``snakemake --config`` values with their strings parsed as the type each key asks for."""
    return _coerce_config(overrides, schema, text=True)


def normalise(config: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with whole-number floats turned into ints wherever the schema asks for an integer."""
    return _coerce_config(config, schema, text=False)
