"""The monitored metric against each numeric swept key: which learning rate, at a glance.

One panel per key (configurations.numeric_keys); a point per configuration at the mean of its seeds'
best scores, with an error bar of one sample standard deviation either side; a grey line joins the
configurations that differ only in that key. The x axis is logarithmic when the key's values span
two decades (configurations.log_axis). Colours are the configurations', as in the curves figure.

gids, read back by ``figures.plotted_series``: ``mean|<key>|<configuration>`` (the point),
``spread|<key>|<configuration>`` (its error bar, where there are two seeds or more),
``series|<key>|<the other keys' values>`` (the line).
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from snakeddp.config import flatten
from snakeddp.report import configurations
from snakeddp.report.figures import label, legend_below, run_styles
from snakeddp.run.runs import Run


def _series(groups: Sequence[configurations.Configuration], key: str) -> dict[str, list[configurations.Configuration]]:
    """Configurations by their values of the other keys: each series varies only in ``key``."""
    found: dict[str, list[configurations.Configuration]] = {}
    for group in groups:
        others = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in group.params.items() if k != key)
        found.setdefault(others or "all", []).append(group)
    return found


def _x(group: configurations.Configuration, key: str) -> float:
    return float(flatten(group.runs[0].provenance["config"])[key])


def tuning(runs: Sequence[Run], keys: Sequence[str]) -> Figure:
    """The figure; a panel that says why it is empty where no configuration has a score to rank by."""
    groups = configurations.group(runs)
    ranked = configurations.ranked(groups)
    styles = run_styles(groups)
    fig = Figure(figsize=(5.2 * max(1, len(keys)), 4.4), layout="constrained")
    axes = fig.subplots(1, max(1, len(keys)), squeeze=False)[0]
    if not ranked or not keys:
        why = "no numeric swept key" if not keys else "the runs rank by different metrics, or have no score"
        axes[0].text(0.5, 0.5, f"Nothing to plot: {why}", ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
        return fig
    monitor = ranked[0].monitor
    scored = [group for group in groups if group in ranked]
    for ax, key in zip(axes, keys, strict=True):
        xs = []
        for name, members in _series(scored, key).items():
            members = sorted(members, key=lambda group: _x(group, key))
            points = [(_x(group, key), group.score.mean) for group in members]
            xs += [x for x, _ in points]
            if len(members) > 1:
                ax.plot(*zip(*points, strict=True), color="0.65", linewidth=1.2, zorder=1, gid=f"series|{key}|{name}")
            for group, (x, mean) in zip(members, points, strict=True):
                style, std = styles[group.name], group.score.std
                drawn = ax.errorbar(
                    [x], [mean], yerr=[[std], [std]] if std is not None else None, fmt=style["marker"],
                    color=style["color"], markersize=7, capsize=4, elinewidth=1.4, zorder=2,
                )  # fmt: skip
                drawn.lines[0].set_gid(f"mean|{key}|{group.name}")
                if std is not None:
                    drawn.lines[2][0].set_gid(f"spread|{key}|{group.name}")
        if configurations.log_axis(xs):
            ax.set_xscale("log")
        ax.set_xlabel(key + (" (log scale)" if configurations.log_axis(xs) else ""))
        better = "lower" if monitor["mode"] == "min" else "higher"
        ax.set_ylabel(f"best {label(monitor['metric'])}, mean over seeds ({better} is better)")
        ax.set_title(f"{monitor['metric']} vs {key}")
        ax.grid(alpha=0.3)
    handles = [
        Line2D([], [], color=styles[g.name]["color"], marker=styles[g.name]["marker"], linestyle="",
               label=f"{g.name} ({len(g.runs)} seed{'s' if len(g.runs) > 1 else ''})")
        for g in scored
    ]  # fmt: skip
    legend_below(fig, handles, 4)
    return fig
