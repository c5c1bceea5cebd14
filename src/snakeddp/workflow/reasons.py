"""Why Snakemake reruns a job, in words a person reads: a changed parameter by its key.

Snakemake words a params change as the two serialized values, and a run's parameter is its whole
config (about 2 KB of JSON), so an ``lr`` edit read "Params have changed since last execution:
Union of exclusive params before and now across all output: before: '{...}' now: '{...}'".
Here it reads ``model.lr: 0.003 → 0.01``.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

#: Longest a value is shown in a reason (a list of 100 hidden sizes is not read, only seen changed).
SHOWN = 60
#: Nothing on one side of a key that is new or gone.
ABSENT = object()


def decode(serialized: str) -> Any:
    """A parameter as Snakemake's metadata holds it (``repr`` of the value; a run is JSON text)."""
    try:
        value = ast.literal_eval(serialized)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return serialized
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"model": {"lr": 0.01}}`` -> ``{"model.lr": 0.01}``; anything but a mapping is one leaf."""
    if not isinstance(value, dict) or not value:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in value.items():
        flat.update(leaves(item, f"{prefix}.{key}" if prefix else str(key)))
    return flat


#: A digest (a table's sha256, a commit) is told apart by its first characters.
DIGEST = re.compile(r"(?=[a-f]*[0-9])(?:[0-9a-f]{40}|[0-9a-f]{64})")


def shown(value: Any) -> str:
    if value is ABSENT:
        return "(none)"
    if isinstance(value, str) and DIGEST.fullmatch(value):
        return value[:12] + "…"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def list_change(was: list[Any], now: list[Any]) -> str | None:
    """What a long list gained and lost (``+ "region"``), or that only its order changed: both lists whole were cut
    to the same first 60 characters where the change was at the end (``data.table.features``). None for lists
    short enough to show whole."""
    if max(len(shown(was)), len(shown(now))) < SHOWN:
        return None
    before, after = (Counter(json.dumps(item, sort_keys=True, default=str) for item in side) for side in (was, now))
    added, removed = list((after - before).elements()), list((before - after).elements())
    if not added and not removed:
        return f"the same {len(now)} values in another order"
    return ", ".join(
        [*(f"+ {shown(json.loads(item))}" for item in added), *(f"- {shown(json.loads(item))}" for item in removed)]
    )


def _change(key: str, old: dict[str, Any], new: dict[str, Any]) -> tuple[str, str, str]:
    """A changed key's last name and both its values as shown."""
    return key.rsplit(".", 1)[-1], shown(old.get(key, ABSENT)), shown(new.get(key, ABSENT))


def changes(before: Any, after: Any) -> list[str]:
    """``key: old → new`` for each key whose value differs. A run's parameter holds its config
    under ``config``: those keys are named as the config file names them (``model.lr``), and a key
    beside it that changed as a config key of the same name did is not named again (the report's
    ``settings.title`` is its ``report.title``)."""
    old, new = leaves(before), leaves(after)
    run = isinstance(before, dict) and "config" in before
    changed = [key for key in sorted(old.keys() | new.keys()) if old.get(key, ABSENT) != new.get(key, ABSENT)]
    in_config = {_change(key, old, new) for key in changed if run and key.startswith("config.")}
    lines = []
    for key in changed:
        was, now = old.get(key, ABSENT), new.get(key, ABSENT)
        if not key.startswith("config.") and _change(key, old, new) in in_config:
            continue
        name = key.removeprefix("config.") if run else key
        said = list_change(was, now) if isinstance(was, list) and isinstance(now, list) else None
        lines.append(f"{name + ': ' if name else ''}{said or f'{shown(was)} → {shown(now)}'}")
    return lines


def describe(only_old: Iterable[str], only_new: Iterable[str]) -> str:
    """The keys that changed between a job's recorded parameters and today's, pairing each old
    value with the new one that shares most of its keys' values."""
    olds = [decode(value) for value in sorted(only_old)]
    news = [decode(value) for value in sorted(only_new)]
    lines: list[str] = []
    for old in olds:
        if not news:
            lines.append(f"{shown(old)} → (none)")
            continue
        flat = leaves(old)
        new = max(news, key=lambda candidate: sum(flat.get(k, ABSENT) == v for k, v in leaves(candidate).items()))
        news.remove(new)
        lines.extend(changes(old, new))
    lines.extend(f"(none) → {shown(new)}" for new in news)
    return ", ".join(lines)
