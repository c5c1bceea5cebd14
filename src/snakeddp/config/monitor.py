"""Which way a metric improves, read from its name, and the monitor whose mode says the other way by default.

A loss or an error falls, an accuracy (or F1, AUC, precision, recall, R²) rises: the report's best:<metric> columns
read a metric's direction from its name, and so does the check that ``trainer.monitor: {metric: val_acc}`` (or
``search: {metric: val_acc}``) says its mode, whose default (min) would keep the epoch of the lowest accuracy as the
best checkpoint and stop early while it rises (a search: keep the configurations of the lowest).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from snakeddp.errors import ConfigError

FALLING = ("loss", "error", "mse", "mae")
RISING = ("acc", "accuracy", "f1", "auc", "auroc", "precision", "recall", "r2")


def _part(layer: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any] | None:
    for key in path:
        layer = layer.get(key) if isinstance(layer, Mapping) else None
    return layer if isinstance(layer, Mapping) else None


def rising_without_mode(layers: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """``(section, metric)`` where the config, as ``layers`` make it up (config/config.yaml, each --configfile, then
    --config; or one config before defaults), names a metric to rank epochs or configurations by (trainer.monitor,
    search) whose name says it rises, and gives it no mode in the layer that names it or a later one: its mode is
    then a default (config/config.yaml's min, the schema's, or search's trainer.monitor's) chosen for another
    metric. Else None: a mode given with the metric, either one, is the user's choice."""
    trainer_mode = None
    for section, path in (("trainer.monitor", ("trainer", "monitor")), ("search", ("search",))):
        metric, named_at, mode_at = None, None, None
        for index, layer in enumerate(layers):
            part = _part(layer, path)
            if part is None:
                continue
            if "metric" in part:
                metric, named_at = part["metric"], index
            if part.get("mode") is not None:
                mode_at = index
                trainer_mode = part["mode"] if section == "trainer.monitor" else trainer_mode
        if section == "search" and mode_at is None and trainer_mode == "max":  # search's mode is trainer.monitor's
            continue
        unchosen = mode_at is None or (named_at is not None and mode_at < named_at)
        if isinstance(metric, str) and metric.endswith(RISING) and unchosen:
            return section, metric
    return None


def mode_error(section: str, metric: str, source: str) -> ConfigError:
    default = "min" if section == "trainer.monitor" else "trainer.monitor's"
    return ConfigError(
        f"{source}: {section}.metric is {metric!r}, which rises as the model improves, and {section}.mode is left at "
        f"its default, {default}: the best would be its lowest value. HINT: set {section}.mode: max beside it (or "
        "mode: min if lower is better)."
    )
