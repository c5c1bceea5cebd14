"""The config schema (config/schema.yaml links to it): the one definition of every key."""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from typing import Any

from snakeddp.platforms import names as platform_names
from snakeddp.util import yamltext

SCHEMA_FILE = "config.schema.yaml"


@functools.cache
def _parsed_schema(name: str) -> dict[str, Any]:
    text = resources.files("snakeddp.schemas").joinpath(name).read_text()
    return yamltext.safe_load(text) if name.endswith(".yaml") else json.loads(text)


def platforms() -> tuple[str, ...]:
    """The platforms the schema file lists: those shipped with snakeddp (the table's rows)."""
    return tuple(_parsed_schema(SCHEMA_FILE)["properties"]["platform"]["enum"])


def load_schema(name: str = SCHEMA_FILE) -> dict[str, Any]:
    """The parsed schema (a private copy). Parsed once per process: a sweep validates every run,
    and re-parsing the YAML each time cost a 32-run dry run about a second. The config's ``platform``
    takes every registered platform: the file's and those installed packages add (snakeddp.platforms)."""
    schema = copy.deepcopy(_parsed_schema(name))
    if name == SCHEMA_FILE:
        schema["properties"]["platform"]["enum"] = list(platform_names())
    return schema
