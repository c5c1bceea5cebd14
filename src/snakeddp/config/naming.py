"""Run ids: a readable name made from a sweep point's values, the same whatever order the sweep lists them.

A run id names the run's directory, so it is the run's identity on disk: the keys of a point are put in
one canonical order (the schema's: data.*, model.*, trainer.*, launch.*, then ``seed``, so an id reads as
configuration then seed, ``lr-0.01_seed-1``), and reordering the keys of a sweep renames nothing. An
``experiment:`` name, when set, comes first (``lr-search--lr-0.01_seed-1``), so two experiments keep
their own run directories.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from snakeddp.config.schema import load_schema

# Top-level run keys in the order an id shows them: what is configured first, the seed last.
TOP_ORDER = ("data", "model", "trainer", "launch", "seed")
# Between an experiment's name and the point's id: '--' never appears in a point id's key names,
# and the experiment's pattern (the schema) refuses it, so an id reads back unambiguously.
EXPERIMENT_SEPARATOR = "--"
BASE = "base"


@functools.cache
def _properties() -> dict[str, Any]:
    return load_schema()["properties"]


def order_key(key: str) -> tuple[tuple[int, str], ...]:
    """Where a dotted sweep key sorts: by the position of each part among its section's properties in
    the schema; a part the schema does not list (model.kwargs.width) after the listed ones, by name."""
    first, *rest = key.split(".")
    top = TOP_ORDER.index(first) if first in TOP_ORDER else len(TOP_ORDER)
    parts = [(top, "" if first in TOP_ORDER else first)]
    node = _properties().get(first, {})
    for part in rest:
        properties = list(node.get("properties", {}))
        if part in properties:
            parts.append((properties.index(part), ""))
            node = node["properties"][part]
        else:
            parts.append((len(properties), part))
            node = {}
    return tuple(parts)


def canonical(keys: Iterable[str]) -> list[str]:
    """Sweep keys in the order run ids name them."""
    return sorted(keys, key=order_key)


def _format_value(value: Any) -> str:
    text = repr(value) if isinstance(value, float) else str(value)
    text = text.replace(" ", "").replace("[", "").replace("]", "").replace(",", "x")
    return re.sub(r"[^A-Za-z0-9.+-]", "", text.replace("True", "true").replace("False", "false"))


def run_id(point: Mapping[str, Any], experiment: str | None = None) -> str:
    """A readable id from a sweep point: {'seed': 1, 'model.lr': 0.01} -> lr-0.01_seed-1, whatever the
    order of its keys; ``experiment`` in front of it (lr-search--lr-0.01_seed-1) when given.

    Keys are shortened to their last part unless two sweep keys share it.
    """
    keys = canonical(point)
    leaves = [key.rsplit(".", 1)[-1] for key in keys]
    names = [leaf if leaves.count(leaf) == 1 else key for leaf, key in zip(leaves, keys, strict=True)]
    rid = "_".join(f"{name}-{_format_value(point[key])}" for name, key in zip(names, keys, strict=True)) or BASE
    return f"{experiment}{EXPERIMENT_SEPARATOR}{rid}" if experiment else rid
