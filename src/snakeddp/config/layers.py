"""The config as Snakemake puts it together, with three exceptions: a sweep is a unit, ``{}`` empties, and a
typed null removes a key of a free-form mapping.

Snakemake merges config/config.yaml, then each ``--configfile``, then ``--config`` key by key, down
to the leaves. For ``sweep:`` that would add the file's swept keys to the ones you gave (the default
config's ``launch.devices: [1, 2]`` doubling a sweep of learning rates), so the last sweep given
replaces the others whole. An empty mapping merged key by key changes nothing, so ``--config 'model={kwargs:
{}}'`` could not clear the file's model.kwargs: a ``{}`` a layer gives replaces the mapping under it
(``replace_emptied``); a null typed with --config for a key of a free-form mapping (model.kwargs) removes the key
(``remove_nulled``). The Snakefile applies them to the config Snakemake merged; ``snakeddp runs``
rebuilds the same config from the same flags with ``compose``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from snakeddp.config import flatten
from snakeddp.config.coerce import SWEEP, command_line, subschema
from snakeddp.config.schema import load_schema
from snakeddp.errors import ConfigError
from snakeddp.util import yamltext


def merge(config: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """``layer`` merged into ``config`` in place, as Snakemake's update_config does: sections key by
    key, any other value replaced."""
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(config.get(key), dict):
            merge(config[key], value)
        else:
            config[key] = copy.deepcopy(value)
    return config


def given_sweep(layers: Sequence[Mapping[str, Any]]) -> Any | None:
    """The sweep of the last layer that gives one (--config after every --configfile), else None."""
    found = [layer[SWEEP] for layer in layers if isinstance(layer, Mapping) and SWEEP in layer]
    return copy.deepcopy(found[-1]) if found else None


def replace_sweep(config: dict[str, Any], layers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``config`` with the sweep the layers give in place of the merged one (unchanged when none gives one)."""
    sweep = given_sweep(layers)
    if sweep is not None:
        config[SWEEP] = sweep
    return config


def emptied(layer: Mapping[str, Any], within: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Where ``layer`` gives an empty mapping (``model: {kwargs: {}}``: ("model", "kwargs")); not the sweep's
    ``{}``, which replace_sweep takes."""
    found: list[tuple[str, ...]] = []
    for key, value in layer.items():
        if isinstance(value, Mapping) and (within or key != SWEEP):
            found += emptied(value, (*within, key)) if value else [(*within, key)]
    return found


def _at(config: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        config = config.get(key) if isinstance(config, Mapping) else None
    return config


def replace_emptied(config: dict[str, Any], layers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``config`` (the layers merged key by key) with each mapping a layer gives as ``{}`` emptied: what the layers
    after the last that empties it (or a section around it) give under it, and nothing of the layers before."""
    every = [emptied(layer) for layer in layers]
    for path in sorted({path for paths in every for path in paths}, key=len):
        last = max(i for i, paths in enumerate(every) if any(path[: len(p)] == p for p in paths))
        value: dict[str, Any] = {}
        for layer in layers[last + 1 :]:
            if isinstance(given := _at(layer, path), Mapping):
                merge(value, given)
        parent = _at(config, path[:-1])
        if isinstance(parent, dict) and isinstance(parent.get(path[-1]), dict):
            parent[path[-1]] = value
    return config


def _free_form(schema: Mapping[str, Any]) -> bool:
    """Whether a mapping's keys are the user's (model.kwargs, data.module_kwargs, network.env, spark.conf): the
    schema types it an object and lists none of its keys."""
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else declared or []
    return "object" in types and not schema.get("properties")


def nulled(layer: Mapping[str, Any], schema: Mapping[str, Any], within: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Where ``layer`` (the typed --config) gives null to a key of a free-form mapping (``model: {kwargs: {dropout:
    null}}``: ("model", "kwargs", "dropout")); not in the sweep, whose keys' values are lists."""
    found: list[tuple[str, ...]] = []
    for key, value in layer.items():
        if not within and key == SWEEP:
            continue
        if isinstance(value, Mapping):
            found += nulled(value, schema, (*within, key))
        elif value is None and within and _free_form(subschema(schema, ".".join(within))):
            found.append((*within, key))
    return found


def remove_nulled(config: dict[str, Any], command_line: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without each key of a free-form mapping that ``command_line`` (the typed --config) gives as null:
    Snakemake's merge would set it to None, so a key config/config.yaml sets could not be taken away from the command
    line (``--config 'model={kwargs: {dropout: null}}'``: the constructor's own default). A null in a config file
    stays a value (a constructor's None)."""
    for path in nulled(command_line, load_schema()):
        parent = _at(config, path[:-1])
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    return config


def compose(base: Mapping[str, Any], layers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """config/config.yaml (``base``) with the command line's layers (each --configfile, then --config) on top."""
    config = copy.deepcopy(dict(base))
    for layer in layers:
        merge(config, layer)
    return replace_emptied(replace_sweep(config, layers), layers)


def _scalar(text: str) -> Any:
    """A --config value as Snakemake reads it (snakemake.cli.parse_config): int, float, True/False,
    else YAML with every scalar a string, which ``coerce.command_line`` then types by the schema."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    if text in ("True", "False"):
        return text == "True"
    try:
        return yaml.load(text, Loader=yaml.BaseLoader)  # BaseLoader builds strings, lists and dicts
    except yaml.YAMLError:
        return text


def command_line_config(entries: Sequence[str]) -> dict[str, Any]:
    """``--config KEY=VALUE ...`` as the layer Snakemake makes of it, typed by the schema."""
    layer: dict[str, Any] = {}
    for entry in entries:
        key, equals, text = entry.partition("=")
        if not equals or not key:
            raise ConfigError(
                f"--config {entry!r} is not KEY=VALUE. HINT: write it as snakemake takes it, e.g. "
                "--config 'trainer={max_epochs: 3}'."
            )
        merge(layer, {key: _scalar(text) if text else None})
    return command_line(layer, load_schema())


def load_layer(path: str | Path) -> dict[str, Any]:
    """A config file (config/config.yaml, a --configfile): YAML or JSON with keys at the top level."""
    try:
        layer = yamltext.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"{path}: {error.strerror}. HINT: give the path of an existing config file.") from None
    except yaml.YAMLError as error:
        raise ConfigError(
            f"{path}: not valid YAML ({' '.join(str(error).split())}). HINT: fix the file and rerun."
        ) from None
    if not isinstance(layer, dict):
        raise ConfigError(f"{path}: not a mapping of keys. HINT: give a config file like config/config.yaml.")
    return layer


def check_not_swept(command_line: Mapping[str, Any], sweep: Mapping[str, Any]) -> None:
    """A ConfigError when ``--config`` sets a key the sweep sets in every run: typed, it would be silently
    replaced (the default config sweeps launch.devices, so --config 'launch={devices: 4}' trained on 1 and 2)."""
    typed = flatten({key: value for key, value in command_line.items() if key != SWEEP})
    for key, value in typed.items():
        swept = next((k for k in sweep if key == k or key.startswith(f"{k}.")), None)
        if swept is not None:
            raise ConfigError(
                f"--config sets {key}={value!r}, and the sweep sets {swept} in every run ({swept}: "
                f"{sweep[swept]}), so it would be silently ignored. HINT: sweep it instead, e.g. "
                f"--config 'sweep={{{swept}: [{_flow(value) if key == swept else '...'}]}}' (it replaces the "
                "config file's whole sweep)."
            )


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
