"""The config schema (config/schema.yaml links to it): the one definition of every key."""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from typing import Any

from snakeddp.util import yamltext

SCHEMA_FILE = "config.schema.yaml"


@functools.cache
def _parsed_schema(name: str) -> dict[str, Any]:
    text = resources.files("snakeddp.schemas").joinpath(name).read_text()
    return yamltext.safe_load(text) if name.endswith(".yaml") else json.loads(text)


def platforms() -> tuple[str, ...]:
    """Where training processes can start (``platform``): the schema's list, the one there is."""
    return tuple(_parsed_schema(SCHEMA_FILE)["properties"]["platform"]["enum"])


def load_schema(name: str = SCHEMA_FILE) -> dict[str, Any]:
    """The parsed schema (a private copy). Parsed once per process: a sweep validates every run,
    and re-parsing the YAML each time cost a 32-run dry run about a second."""
    return copy.deepcopy(_parsed_schema(name))
