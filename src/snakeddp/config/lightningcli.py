"""LightningCLI's way of naming a class, read as snakeddp's keys.

``LightningCLI --print_config`` writes a model or DataModule as ``class_path: package.module.ClassName``
plus ``init_args: {...}``; snakeddp's keys are ``model.target: package.module:ClassName`` plus
``model.kwargs`` (``data.module`` plus ``data.module_kwargs``). A config is rewritten to snakeddp's keys
as it is loaded, before it is validated or hashed, so a run written either way is the same run: the
same run id, identity, run.yaml and provenance, and every message after loading names snakeddp's keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from snakeddp.errors import ConfigError

CLASS_PATH = "class_path"
INIT_ARGS = "init_args"
# Per section, snakeddp's keys for LightningCLI's class_path and init_args.
OURS = {"model": ("target", "kwargs"), "data": ("module", "module_kwargs")}
SWEEP = "sweep"


def import_path(class_path: str) -> str:
    """``package.module.ClassName`` (LightningCLI) as ``package.module:ClassName`` (snakeddp); a path that
    already has its colon, or has no dot to split at, is returned as it is."""
    if ":" in class_path or "." not in class_path:
        return class_path
    module, _, name = class_path.rpartition(".")
    return f"{module}:{name}"


def _is_set(value: Any) -> bool:
    """Whether a key holds more than its default (null, {}): a validated config has every key at least there."""
    return value is not None and value != {}


def _section(section: Mapping[str, Any], name: str, source: str) -> dict[str, Any]:
    target_key, kwargs_key = OURS[name]
    theirs = [key for key in (CLASS_PATH, INIT_ARGS) if key in section]
    ours = [key for key in (target_key, kwargs_key) if _is_set(section.get(key))]
    if theirs and ours:
        raise ConfigError(
            f"{source}: {name} mixes LightningCLI's form ({name}.{theirs[0]}) with snakeddp's ({name}.{ours[0]}). "
            f"HINT: write {name} one way, class_path + init_args or {target_key} + {kwargs_key}, in every config "
            "file and --config that sets it."
        )
    rewritten = dict(section)
    class_path, init_args = section.get(CLASS_PATH), section.get(INIT_ARGS)
    if _is_set(init_args) and class_path is None:
        raise ConfigError(
            f"{source}: {name}.init_args only applies with {name}.class_path, so here it would be silently ignored. "
            f"HINT: set {name}.class_path as well, or remove {name}.init_args."
        )
    if isinstance(class_path, str):
        if "." not in class_path and ":" not in class_path:
            raise ConfigError(
                f"{source}: {name}.class_path={class_path!r} names no module. HINT: write it as LightningCLI does, "
                "'package.module.ClassName', e.g. 'examples.tabular.model.TabularNet'."
            )
        rewritten[target_key] = import_path(rewritten.pop(CLASS_PATH))
    elif class_path is None:
        rewritten.pop(CLASS_PATH, None)
    # Anything else is left where it is, for the schema to name as the user wrote it.
    if isinstance(init_args, Mapping) or init_args is None:
        rewritten.pop(INIT_ARGS, None)
        if init_args is not None:
            rewritten[kwargs_key] = dict(init_args)
    return rewritten


def _sweep_key(key: str) -> str:
    """A swept key in snakeddp's spelling: model.init_args.width -> model.kwargs.width."""
    name, _, rest = key.partition(".")
    part, dot, below = rest.partition(".")
    if name not in OURS or part not in (CLASS_PATH, INIT_ARGS):
        return key
    return f"{name}.{OURS[name][part == INIT_ARGS]}{dot}{below}"


def _sweep(sweep: Mapping[str, Any], source: str) -> dict[str, Any]:
    rewritten: dict[str, Any] = {}
    for key, values in sweep.items():
        ours = _sweep_key(key)
        if ours in rewritten or (ours != key and ours in sweep):
            raise ConfigError(
                f"{source}: sweep gives {ours} twice, in LightningCLI's spelling and in snakeddp's. "
                f"HINT: keep one of sweep.{key} and sweep.{ours}."
            )
        if ours != key and key.endswith(f".{CLASS_PATH}") and isinstance(values, list):
            values = [import_path(value) if isinstance(value, str) else value for value in values]
        rewritten[ours] = values
    return rewritten


def normalise(config: Mapping[str, Any], source: str = "config") -> dict[str, Any]:
    """``config`` with the model's and the DataModule's class_path + init_args (sections and sweep keys)
    rewritten as snakeddp's keys; ``config`` itself is left as it was. Refuses a section that mixes the
    two forms, init_args without class_path and a class_path without a module, one line each."""
    normalised = dict(config)
    for name in OURS:
        if isinstance(config.get(name), Mapping):
            normalised[name] = _section(config[name], name, source)
    if isinstance(config.get(SWEEP), Mapping):
        normalised[SWEEP] = _sweep(config[SWEEP], source)
    return normalised
