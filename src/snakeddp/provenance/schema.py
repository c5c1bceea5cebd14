"""The JSON Schema of provenance.json (``schemas/provenance.schema.json``) and checks against it.

The schema is the one description of what a run's provenance holds; the report, the RO-Crate
and ``snakeddp verify`` read only what it promises, and the tests hold every record the
pipeline writes to it.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

from snakeddp.errors import ProvenanceError
from snakeddp.run.layout import PROVENANCE
from snakeddp.run.tries import schema as tries_schema
from snakeddp.util import rerun, schemas

SCHEMA_FILE = "provenance.schema.json"


def schema() -> dict[str, Any]:
    return schemas.packaged(SCHEMA_FILE)


@cache
def _registry() -> Registry:
    """The schemas provenance's refers to: a try and its goodput are defined once, in tries.json's."""
    tries = Resource.from_contents(tries_schema())
    return Registry().with_resource(tries_schema()["$id"], tries)


def problems(record: Any) -> list[str]:
    """One line per schema violation, named by the dotted key, in a stable order."""
    validator = jsonschema.Draft202012Validator(schema(), registry=_registry())
    lines = []
    for error in sorted(validator.iter_errors(record), key=lambda e: [str(p) for p in e.absolute_path]):
        key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        lines.append(f"{key}: {error.message}")
    return lines


def validate(record: Any, source: str = PROVENANCE) -> None:
    """Raise ProvenanceError unless ``record`` matches the provenance schema."""
    found = problems(record)
    if found:
        # One line (the first problem, and how many more), as every refusal is: docs/security.md.
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ProvenanceError(
            f"{source} does not match {SCHEMA_FILE}: {found[0][:200]}{more}. HINT: it was written by a different "
            f"snakeddp version, or edited by hand; rerun the run's train job: {rerun.forcing(source)}"
        )


def validate_file(path: str | Path) -> dict[str, Any]:
    """Read and validate one provenance.json; returns the record."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProvenanceError(f"{path}: cannot read provenance: {exc}") from None
    validate(record, source=str(path))
    return record
