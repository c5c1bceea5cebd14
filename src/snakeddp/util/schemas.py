"""Records checked against their JSON schema: the first way one breaks it, in a few words."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from snakeddp.util.fsutil import read_json


@cache
def packaged(name: str) -> dict[str, Any]:
    """The JSON schema ``name`` that ships in snakeddp.schemas, parsed once per process (shared: not to be changed)."""
    return json.loads(resources.files("snakeddp.schemas").joinpath(name).read_text(encoding="utf-8"))


def problem(instance: Any, schema: dict[str, Any]) -> str | None:
    """The first way ``instance`` breaks ``schema`` (where, then what), or None."""
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(instance))
    if error is None:
        return None
    return f"{'.'.join(map(str, error.absolute_path)) or 'top level'}: {error.message[:160]}"


def read_checked(path: Path, schema: dict[str, Any]) -> tuple[Any, str | None]:
    """The JSON at ``path`` and None where it is valid against ``schema``; else None and why it is not."""
    try:
        record = read_json(path)
    except (OSError, ValueError) as error:
        return None, f"not JSON: {str(error)[:120]}"
    found = problem(record, schema)
    return (record, None) if found is None else (None, found)
