"""A rule's JSON parameter that reaches its step as a file, not as command-line text.

A run's config (up to 64 KiB of JSON, config.bounds) and a search's plan (every configuration's
run ids) are rule parameters: Snakemake keeps them in ``.snakemake/metadata`` and reruns a job
when they change. Formatted into the shell command they would also be arguments, which Linux
caps at 128 KiB each (MAX_ARG_STRLEN) and ARG_MAX together.

``ParamFile`` is both. As a string it is the JSON text, which is what Snakemake records: it
serializes a parameter with ``repr`` (snakemake/persistence: ``_serialize_param``), so the record,
and with it every finished pipeline's rerun key, is what it was when the JSON was the argument
(tests/e2e/test_upgrade.py). Formatted into a command (``{params.run:q}``: Snakemake's
``QuotedFormatter`` calls ``format``) it is the path of a file holding that text,
``.snakemake/snakeddp/params/<sha256>.json``: named by its content's sha256, written once while
the workflow is planned (a dry run too: it is the same file whenever it is written), never
rewritten, and checked against its name by the step that reads it (``read``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from snakeddp.errors import ConfigError
from snakeddp.util.fsutil import atomic_write_text
from snakeddp.util.hashing import sha256_bytes

STORE = Path(".snakemake/snakeddp/params")
_NAME = re.compile(r"[0-9a-f]{64}\.json")


class ParamFile(str):
    """JSON text (what Snakemake records) that formats as the path of the file holding it."""

    path: Path

    def __new__(cls, text: str, store: Path = STORE) -> ParamFile:
        value = super().__new__(cls, text)
        value.path = store / f"{sha256_bytes(text.encode())}.json"
        return value

    def __format__(self, spec: str) -> str:
        return format(str(self.path), spec)

    def __reduce__(self) -> tuple[Any, ...]:
        return ParamFile, (str(self), self.path.parent)


def param_file(text: str, store: Path = STORE) -> ParamFile:
    """The JSON ``text`` as a parameter, its file written if it is not there yet (atomically: another
    invocation planning the same value writes the same bytes)."""
    param = ParamFile(text, store)
    if not param.path.is_file():
        atomic_write_text(param.path, param)
    return param


def read(path: str | Path) -> Any:
    """The JSON value of a parameter file, refused in one line unless its content has the sha256 its
    name says (a file someone rewrote after it was planned)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read this planned parameter file ({exc.strerror}). HINT: run snakemake again: "
            "it writes the file while it plans the workflow."
        ) from None
    if not _NAME.fullmatch(path.name) or sha256_bytes(data) != path.stem:
        raise ConfigError(
            f"{path}: its content is not the parameter it was planned with (its sha256 is not its name). "
            f"HINT: delete it (rm {path}) and run snakemake again: it is written afresh from the config."
        )
    return json.loads(data)
