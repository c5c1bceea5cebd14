"""How large and how deep a config may be, checked before anything walks it.

YAML aliases make a few hundred bytes stand for a tree of billions of values: PyYAML loads them as
shared references, but every walk of the config (coercion, validation, the sweep's copies, the run's
JSON) expands them. A real snakeddp config has a few hundred values, nested a few levels; the
limits sit far above that and far below what costs a second. A run's config is a few KiB; one past
MAX_RUN_BYTES carries data, which every record of the run (run.yaml, provenance, the report's
crate) would copy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from snakeddp.errors import ConfigError

MAX_VALUES = 50_000
MAX_DEPTH = 32
MAX_RUN_BYTES = 64 * 1024
# Each run is a job, a directory and a row of the report; a grid past this is a typo, not a plan.
MAX_RUNS = 10_000


def check_shape(config: Any, source: str = "config") -> None:
    """Refuse ``config`` when it holds more than MAX_VALUES values once aliases are expanded, or
    nests deeper than MAX_DEPTH; stops counting at the limit, so a bomb costs microseconds."""
    count = 0
    stack: list[tuple[Any, tuple[str, ...]]] = [(config, ())]
    while stack:
        value, path = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(
                f"{source}: more than {MAX_VALUES} values once YAML aliases (*name) are expanded. HINT: a "
                "snakeddp config has a few hundred values; write them out instead of nesting aliases."
            )
        if len(path) > MAX_DEPTH:
            raise ConfigError(
                f"{source}: {'.'.join(path[:4])}... nests deeper than {MAX_DEPTH} levels. HINT: no snakeddp key "
                "nests more than a few levels; flatten the value (config/schema.yaml documents every key)."
            )
        if isinstance(value, Mapping):
            stack.extend((item, (*path, str(key))) for key, item in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((item, (*path, str(index))) for index, item in enumerate(value))


def check_run_size(run_id: str, run: Mapping[str, Any]) -> None:
    """A run's config is settings, not data: at most MAX_RUN_BYTES of JSON."""
    size = len(json.dumps(run, sort_keys=True))
    if size > MAX_RUN_BYTES:
        largest = max(run, key=lambda key: len(json.dumps(run[key], sort_keys=True)))
        raise ConfigError(
            f"run {run_id}: its config is {size // 1024} KiB (most of it under '{largest}'), more than the "
            f"{MAX_RUN_BYTES // 1024} KiB a run config may be. HINT: keep large values (data, lists of "
            "numbers) in files your model or DataModule reads, and name the file in the config."
        )


def check_sweep_size(sweep: Mapping[str, list[Any]], source: str = "config") -> None:
    """The grid's size, from the lengths of its lists, before any point of it is built."""
    runs = 1
    for values in sweep.values():
        runs *= len(values)
    if runs > MAX_RUNS:
        sizes = " x ".join(f"{key} ({len(values)})" for key, values in sweep.items())
        raise ConfigError(
            f"{source}: the sweep makes {runs} runs ({sizes}), more than {MAX_RUNS}. HINT: sweep fewer values "
            "per key, or split the question into several sweeps."
        )
