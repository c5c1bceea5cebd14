"""Which way a metric improves, read from its name, and the monitor whose mode says the other way by default.

A loss or an error falls, an accuracy rises: the report's best:<metric> columns read a metric's direction from its
name, and so does the check that ``trainer.monitor: {metric: val_acc}`` (or ``search: {metric: val_acc}``) says its
mode, whose default (min) would keep the epoch of the lowest accuracy as the best checkpoint and stop early while it
rises (a search: keep the configurations of the lowest).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from snakeddp.errors import ConfigError

FALLING = ("loss", "error", "mse", "mae")
RISING = ("acc", "accuracy")


def rising_without_mode(config: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(section, metric)`` where the config names a metric to rank epochs or configurations by (trainer.monitor,
    search) whose name says it rises and leaves its mode to a default (trainer.monitor's: min; search's: that one),
    else None: an explicit mode, either one, is the user's to choose. Asked of a config before defaults."""
    trainer = config.get("trainer")
    places = (
        ("trainer.monitor", trainer.get("monitor") if isinstance(trainer, Mapping) else None),
        ("search", config.get("search")),
    )
    inherited = places[0][1].get("mode") if isinstance(places[0][1], Mapping) else None
    for section, chosen in places:
        if not isinstance(chosen, Mapping) or chosen.get("mode") is not None:
            continue
        if section == "search" and inherited == "max":  # search's mode is trainer.monitor's: max, as it should be
            continue
        metric = chosen.get("metric")
        if isinstance(metric, str) and metric.endswith(RISING):
            return section, metric
    return None


def mode_error(section: str, metric: str, source: str) -> ConfigError:
    default = "min" if section == "trainer.monitor" else "trainer.monitor's"
    return ConfigError(
        f"{source}: {section}.metric is {metric!r}, which rises as the model improves, and {section}.mode is left at "
        f"its default, {default}: the best would be its lowest value. HINT: set {section}.mode: max beside it (or "
        "mode: min if lower is better)."
    )
