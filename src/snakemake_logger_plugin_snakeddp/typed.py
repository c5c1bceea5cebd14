"""Snakemake's errors about what was typed, raised before the Snakefile (and so any snakeddp code) runs, told in one
line with a HINT: a ``--configfile`` that is missing or not YAML, or not a mapping, a ``--config`` entry that
is not ``KEY=VALUE`` or has a dotted key (Hydra's and LightningCLI's ``trainer.max_epochs=3``), and a snakemake
typed where there is no Snakefile (a subdirectory of the checkout: the line names the root to cd to).

Snakemake logs each of these as its formatted traceback or a message that names no file; the record carries
neither the exception nor the settings, so what was typed is read from the command line (``sys.argv``) as
Snakemake's parser takes it. A file or entry given elsewhere (a profile's ``configfile:``) is not found there,
and the record is left as Snakemake wrote it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

# The last line of Snakemake's traceback where opening a --configfile failed: "FileNotFoundError: [Errno 2] No
# such file or directory: 'nope.yaml'" (IsADirectoryError, PermissionError alike).
_NOT_OPENED = re.compile(r"^(\w+Error): \[Errno \d+\] (?P<reason>[^:]+): (?P<path>'.*'|\".*\")$")
_NOT_YAML = "file is not valid JSON or YAML"
_NOT_MAPPING = "Config file must be given as JSON or YAML with keys at top level."
_NOT_KEY_VALUE = "Config entries have to be defined as name=value pairs."
_NOT_IDENTIFIER = "Config entry must start with a valid identifier."
# Snakemake's test of a --config key (snakemake.cli.parse_config).
_KEY = re.compile(r"[a-zA-Z_][\w-]*\w$")
# A key inside a section, as YAML takes it unquoted.
_INNER_KEY = re.compile(r"[a-zA-Z_][\w-]*$")
# Snakemake's error where the working directory holds none of the Snakefiles it looks for (api.resolve_snakefile).
_NO_SNAKEFILE = "No Snakefile found, tried "


def typed_values(argv: Sequence[str], *options: str) -> list[str]:
    """The values given to ``options`` on the command line (``--opt A B``, ``--opt=A``), in order."""
    values: list[str] = []
    taking = False
    for word in argv[1:]:
        option, equals, value = word.partition("=")
        if word.startswith("-"):
            taking = option in options
            if taking and equals:
                values.append(value)
                taking = False
        elif taking:
            values.append(word)
    return values


def told(message: str, exception: str | None, argv: Sequence[str]) -> str | None:
    """The one line for Snakemake's error record (its ``message`` and the ``exception``'s class name), or None
    where it is not one about what was typed, or what was typed cannot be found in ``argv``."""
    lines = message.strip().splitlines()
    if not lines:
        return None
    last = lines[-1].strip()
    configfiles = typed_values(argv, "--configfile", "--configfiles")
    opened = _NOT_OPENED.match(last)
    if opened and "in _load_configfile" in message:
        path = ast.literal_eval(opened["path"])
        return _not_opened(path, opened["reason"], typed=path in configfiles)
    if exception == "WorkflowError" and _NOT_YAML in message:
        return _first_said(configfiles, _not_yaml)
    if exception == "WorkflowError" and _NOT_MAPPING in message:
        return _first_said(configfiles, _not_mapping)
    if exception == "ApiError" and _NO_SNAKEFILE in last:
        return _no_snakefile(Path.cwd())
    entries = typed_values(argv, "--config", "-C")
    if exception == "ValueError" and _NOT_KEY_VALUE in last:
        return _first_without_equals(entries)
    if exception == "ValueError" and _NOT_IDENTIFIER in last:
        return _first_bad_key(entries)
    return None


def _not_opened(path: str, reason: str, typed: bool) -> str:
    where = os.path.abspath(path)
    given = f"--configfile {path}" if typed else f"the configfile {path} a profile gives"
    return (
        f"snakeddp: {given}: {reason.lower()} ({where}). HINT: give a YAML file that exists, its path from "
        f"{os.getcwd()} or absolute, then run the same command again (config/config.yaml is read first; the "
        "--configfile holds only the keys that differ)."
    )


def _no_snakefile(cwd: Path) -> str | None:
    """The line for a snakemake typed where Snakemake finds no Snakefile: cd to the nearest folder above that holds
    one (the checkout's root, typed in a subdirectory of it), else to the checkout this plugin is installed from."""
    from snakemake.common import SNAKEFILE_CHOICES

    def holds_one(folder: Path) -> bool:
        return any((folder / name).is_file() for name in SNAKEFILE_CHOICES)

    root = next((folder for folder in cwd.parents if holds_one(folder)), None)
    if root is not None:
        return (
            f"snakeddp: no Snakefile in {cwd}, a subdirectory of the checkout {root}, which snakemake runs from. "
            f"HINT: cd {root} and run the same command there (config/, profiles/ and results/ are relative to it)."
        )
    # The editable install's src/ (tools/setup.sh), or src/ on PYTHONPATH: its checkout is one floor up.
    own = Path(__file__).resolve().parents[2]
    if holds_one(own):
        return (
            f"snakeddp: no Snakefile in {cwd}, which is outside snakeddp's checkout. HINT: cd {own} (the checkout) "
            "and run the same command there."
        )
    return None


def _load(path: str) -> tuple[object, Exception | None]:
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle), None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        return None, error


def _first_said(configfiles: list[str], said: Callable[[str, object, Exception | None], str | None]) -> str | None:
    """The line ``said`` makes of the first of ``configfiles`` it finds fault with (given what the file loads as,
    or the error loading it raised)."""
    for path in configfiles:
        line = said(path, *_load(path))
        if line is not None:
            return line
    return None


def _not_yaml(path: str, loaded: object, error: Exception | None) -> str | None:
    import yaml

    if not isinstance(error, yaml.MarkedYAMLError) or error.problem_mark is None:
        return None
    mark = error.problem_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    context = ""
    if error.context and error.context_mark is not None and error.context_mark.line != mark.line:
        context = f" ({error.context} from line {error.context_mark.line + 1})"
    problem = (error.problem or "not YAML").replace("\t", "\\t")
    return (
        f"snakeddp: --configfile {path} is not valid YAML: {where}: {problem}{context}. HINT: mend line "
        f"{mark.line + 1} of {path} (YAML indents with spaces, never tabs; a list closes with ']', a mapping "
        "with '}'), then run the same command again."
    )


def _not_mapping(path: str, loaded: object, error: Exception | None) -> str | None:
    if error is not None or isinstance(loaded, dict):
        return None
    holds = "nothing" if loaded is None else f"a {type(loaded).__name__}"
    return (
        f"snakeddp: --configfile {path} holds {holds}, not config keys. HINT: write the sections at the "
        f"top level of {path}, as config/config.yaml does (trainer:, model:, data:, each with its keys), then "
        "run the same command again."
    )


def _first_without_equals(entries: list[str]) -> str | None:
    for entry in entries:
        if "=" not in entry:
            return (
                f"snakeddp: --config {entry}: an entry is KEY=VALUE, a config section and its keys. HINT: type "
                f"--config {shlex.quote(entry + '={KEY: VALUE}')} with the keys to change "
                "(config/schema.yaml documents each), as --config 'trainer={max_epochs: 3}' does."
            )
    return None


def _in_flow(value: str) -> str:
    """``value`` as it goes inside a YAML flow mapping: as typed where it reads there as it would alone
    (``3``, ``[8, 8]``, ``{a: 1}``), else quoted (``a, b``, ``x: y``)."""
    import yaml

    if not value:
        return "null"  # what Snakemake makes of KEY=
    try:
        alone = yaml.safe_load(value)
        inside = yaml.safe_load(f"{{key: {value}}}")
    except yaml.YAMLError:
        return json.dumps(value)
    return value if inside == {"key": alone} else json.dumps(value)


def _first_bad_key(entries: list[str]) -> str | None:
    for entry in entries:
        key, _, value = entry.partition("=")
        if _KEY.match(key):
            continue
        parts = key.split(".")
        if len(parts) > 1 and _KEY.match(parts[0]) and all(_INNER_KEY.match(part) for part in parts[1:]):
            nested = _in_flow(value)
            for part in reversed(parts[1:]):
                nested = f"{{{part}: {nested}}}"
            section = f"{parts[0]}={nested}"
            return (
                f"snakeddp: --config {entry}: Snakemake takes a section with its keys, not a dotted key. HINT: type "
                f"--config {shlex.quote(section)} instead (the section's other keys keep their values)."
            )
        return (
            f"snakeddp: --config {entry}: {key!r} is not a config section (a name of letters, digits and _). HINT: "
            "type --config SECTION={KEY: VALUE} with a section of config/schema.yaml, as --config "
            "'trainer={max_epochs: 3}' does."
        )
    return None
