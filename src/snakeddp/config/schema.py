"""The config schema (config/schema.yaml links to it): the one definition of every key, with what the
registered platforms bring (snakeddp.platforms): their names, their launchers and their sections."""

from __future__ import annotations

import copy
import functools
import importlib
import json
from importlib import resources
from typing import Any

from snakeddp.errors import ConfigError
from snakeddp.platforms import Row, rows
from snakeddp.util import yamltext

SCHEMA_FILE = "config.schema.yaml"
#: The section the platforms' own sections follow, in the registry's order.
PLATFORM_SECTIONS_AFTER = "site"


@functools.cache
def _parsed_schema(name: str) -> dict[str, Any]:
    text = resources.files("snakeddp.schemas").joinpath(name).read_text(encoding="utf-8")
    return yamltext.safe_load(text) if name.endswith(".yaml") else json.loads(text)


def platforms() -> tuple[str, ...]:
    """The platforms the schema file lists: those shipped with snakeddp (the table's rows)."""
    return tuple(_parsed_schema(SCHEMA_FILE)["properties"]["platform"]["enum"])


def load_schema(name: str = SCHEMA_FILE) -> dict[str, Any]:
    """The parsed schema (a private copy). Parsed once per process: a sweep validates every run,
    and re-parsing the YAML each time cost a 32-run dry run about a second. The config's schema is the
    file's with every registered platform's part in it (``assembled``)."""
    return copy.deepcopy(assembled(rows()) if name == SCHEMA_FILE else _parsed_schema(name))


@functools.cache
def assembled(registered: tuple[Row, ...]) -> dict[str, Any]:
    """The config's schema for these platforms: ``platform`` takes each one's name, ``launch.launcher`` the
    file's launchers (those any platform runs) and each one's own, and each one's section is its settings
    part's schema (snakeddp.config.parts.Settings), after the site section."""
    schema = copy.deepcopy(_parsed_schema(SCHEMA_FILE))
    schema["properties"]["platform"]["enum"] = [row.name for row in registered]
    launcher = schema["properties"]["launch"]["properties"]["launcher"]
    owned = [name for row in registered for name in row.own_launchers]
    launcher["enum"] = list(dict.fromkeys([*launcher["enum"], *owned]))
    sections = {row.section: settings_part(row).schema() for row in registered if row.section}
    properties: dict[str, Any] = {}
    for key, value in schema["properties"].items():
        properties[key] = value
        if key == PLATFORM_SECTIONS_AFTER:
            properties.update(sections)
    schema["properties"] = properties
    return schema


def settings_part(row: Row) -> Any:
    """The part a platform's section is read through (a snakeddp.config.parts.Settings, in its package)."""
    module, _, name = (row.settings or "").partition(":")
    part = getattr(importlib.import_module(module), name, None) if module and name else None
    if part is None or getattr(part, "key", None) != row.section:
        raise ConfigError(
            f"the {row.name} platform's section {row.section!r} has no settings part ({row.settings!r}). HINT: set "
            "its row's settings to 'module:Class', a snakeddp.config.parts.Settings whose key is the section."
        )
    return part
