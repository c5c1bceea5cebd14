"""Figures of the measured metrics: every configuration's curves per epoch, throughput scaling vs world size, and
where each run's wall time went (its account).

Every data series is drawn with a ``gid`` naming what it is (``curve|<configuration>|<metric>``,
``band|<configuration>|<metric>``, ``best|<run>``, ``offscale|<configuration>|<metric>``,
``throughput|<run>``, ``ideal|<run>``, ``range|<run>``, ``value|<run>`` (a label),
``efficiency|<series>``, ``account|<run>|<bucket>``; the hyperparameter figure's in ``report.tuning``).
``plotted_series`` reads the numbers back from the drawn artists, so the JSON written beside each figure is
what the figure shows, and a test can hold it against metrics.csv.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from io import BytesIO
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # figures are files; never open a window (clusters have no display)

from matplotlib import colormaps
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from snakeddp.config import flatten
from snakeddp.report import configurations
from snakeddp.report.table import metrics_of, one_based, steady_throughput
from snakeddp.run.runs import Run
from snakeddp.util.fsutil import atomic_write_bytes, atomic_write_json

# Columns of metrics.csv that can be plotted per epoch, with their axis labels.
METRIC_LABELS = {
    "train_loss": "train loss",
    "val_loss": "validation loss",
    "val_acc": "validation accuracy",
    "lr": "learning rate",
    "samples_per_s": "samples/s (all ranks)",
    "data_wait_s": "data wait (s)",
    "epoch_seconds": "epoch time (s)",
    "train_seconds": "train time (s)",
}
LAYOUT_KEYS = ("launch.nodes", "launch.devices")
# Curves sit at zorder 2 and off-scale marks at 3; the best-checkpoint stars go above both.
STAR_ZORDER = 4
# The y-range leaves out the first epoch when that epoch alone would stretch it this many times.
SQUASH = 2.0
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">")


def run_styles(groups: Sequence[configurations.Configuration]) -> dict[str, dict[str, str]]:
    """A colour and marker per configuration (configurations.group), the same in every figure and in the page's
    configurations table (tab10, tab20 past ten): a configuration's seeds share its colour. Dealt in the order of
    the configurations' values, not of the runs handed over: the page lists its runs by id and the figures in the
    workflow's order, and a sweep over lr [0.1, 0.03, 0.01, 0.003] coloured them in opposite orders."""
    cmap = colormaps["tab10" if len(groups) <= 10 else "tab20"]
    ordered = sorted(groups, key=lambda group: (_sort_key(group.params), group.name))
    return {
        group.name: {"color": matplotlib.colors.to_hex(cmap(i % cmap.N)), "marker": MARKERS[i % len(MARKERS)]}
        for i, group in enumerate(ordered)
    }


def _sort_key(params: Mapping[str, Any]) -> tuple[tuple[int, float, str], ...]:
    """Numbers by value before any text, each text by itself: a canonical order of a configuration's values."""
    number = (int, float)
    return tuple(
        (0, float(v), "") if isinstance(v, number) and not isinstance(v, bool) else (1, 0.0, str(v))
        for v in params.values()
    )


def legend_below(fig: Figure, handles: Sequence[Any], most: int) -> Any:
    """The figure's legend under its panels, in as many columns (up to ``most``) as fit its width: a legend wider
    than the figure is cut at both sides when saved."""
    for ncols in range(min(len(handles), most), 0, -1):
        legend = fig.legend(handles=handles, loc="outside lower center", ncols=ncols, frameon=False, fontsize=9)
        if ncols == 1 or legend.get_window_extent().width <= fig.bbox.width:
            return legend
        legend.remove()
    return None


def label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


def plotted_metrics(runs: Sequence[Run], requested: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """(what the curves figure plots, what report.metrics asked for that no run has): report.metrics
    among the columns that hold a value in some run's metrics.csv, or with it null every metric the
    models logged. A panel is never drawn empty: with none of the requested there, the logged ones."""
    logged = metrics_of(runs)
    if requested is None:
        return logged or ["samples_per_s"], []
    present = {name for run in runs for row in run.metrics for name, value in row.items() if value is not None}
    plotted = [name for name in requested if name in present]
    absent = [name for name in requested if name not in present]
    return plotted or logged or ["samples_per_s"], absent


def _panels(metrics: Sequence[str]) -> list[list[str]]:
    """Losses share one panel (train vs val on one scale); every other metric gets its own."""
    losses = [m for m in metrics if m.endswith("_loss")]
    others = [[m] for m in metrics if not m.endswith("_loss")]
    return ([losses] if losses else []) + others


def _values(rows: Sequence[Mapping[str, Any]], column: str) -> tuple[list[float], list[float]]:
    xs = [float(r["epoch"]) for r in rows]
    ys = [float(r[column]) if r.get(column) is not None else math.nan for r in rows]
    return xs, ys


def _focus_after_first_epoch(ax: Any, keep: Sequence[float], named: bool) -> None:
    """Fit the y-axis to the epochs after the first (and ``keep``) when the first epoch's values would
    squash them (a first loss several times the final one). A first-epoch value off that scale is
    drawn at the axis edge as an arrow with its number (and metric, when ``named``), so it stays readable."""
    curves = [line for line in ax.lines if str(line.get_gid()).startswith("curve|")]
    firsts, later = [], list(keep)
    for line in curves:
        points = [(x, y) for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True) if math.isfinite(y)]
        if points:
            firsts.append((line, *points[0]))
            later += [y for _, y in points[1:]]
    if len(later) < 2:
        return
    low, high = min(later), max(later)
    span = high - low
    every = later + [y for _, _, y in firsts]
    if span <= 0 or max(every) - min(every) <= SQUASH * span:
        return
    pad = 0.08 * span
    bottom, top = low - pad, high + pad
    ax.set_ylim(bottom, top)
    stacked = {True: 0, False: 0}
    for line, x, y in firsts:
        if bottom <= y <= top:
            continue
        above = y > top
        name, metric = line.get_gid().split("|", 1)[1].rsplit("|", 1)
        ax.plot([x], [top if above else bottom], marker="^" if above else "v", markersize=7, color=line.get_color(),
                linestyle="", clip_on=False, zorder=3, gid=f"offscale|{name}|{metric}")  # fmt: skip
        # Labels stack away from the edge, one line each, on a white box that the curves pass behind.
        shift = 11 * stacked[above] + 12
        stacked[above] += 1
        ax.annotate(
            f"{metric.split('_')[0]} {y:.3g}" if named else f"{y:.3g}", (x, top if above else bottom),
            xytext=(8, -shift if above else shift - 8), textcoords="offset points", fontsize=7,
            color=line.get_color(), zorder=5, bbox={"boxstyle": "round,pad=0.15", "facecolor": "white",
            "edgecolor": "none", "alpha": 0.9},
        )  # fmt: skip


def _mean_curve(runs: Sequence[Run], metric: str) -> tuple[list[float], list[float], list[float], list[float]]:
    """Epochs (1-based) and, per epoch, the mean, min and max of the metric over the runs that logged
    it there (a run stopped early counts until it stopped); NaN where none did."""
    by_epoch: dict[int, list[float]] = {}
    for run in runs:
        for row in run.metrics:
            value = row.get(metric)
            finite = isinstance(value, int | float) and math.isfinite(value)
            by_epoch.setdefault(int(row["epoch"]), []).extend([float(value)] if finite else [])
    epochs = sorted(by_epoch)
    means = [statistics.fmean(by_epoch[e]) if by_epoch[e] else math.nan for e in epochs]
    lows = [min(by_epoch[e], default=math.nan) for e in epochs]
    highs = [max(by_epoch[e], default=math.nan) for e in epochs]
    return [float(one_based(e)) for e in epochs], means, lows, highs


def curves(runs: Sequence[Run], metrics: Sequence[str]) -> Figure:
    """One figure with every configuration's per-epoch curves, epochs counted from 1: one colour per
    configuration, its mean over the seeds as the line and their range (min to max) as a band; train
    solid, validation dashed; a star at each run's best epoch."""
    panels = _panels(metrics)
    groups = configurations.group(runs)
    styles = run_styles(groups)
    fig = Figure(figsize=(5.2 * len(panels), 4.2), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        stars = []
        for group in groups:
            style = styles[group.name]
            for metric in panel:
                xs, ys, lows, highs = _mean_curve(group.runs, metric)
                ax.plot(
                    xs,
                    ys,
                    color=style["color"],
                    marker=style["marker"],
                    markersize=4,
                    linestyle="--" if metric.startswith("val_") and len(panel) > 1 else "-",
                    gid=f"curve|{group.name}|{metric}",
                )
                if len(group.runs) > 1:
                    band = ax.fill_between(xs, lows, highs, color=style["color"], alpha=0.18, linewidth=0)
                    band.set_gid(f"band|{group.name}|{metric}")
            for run in group.runs:
                monitored, best_epoch = run.monitor["metric"], run.provenance["training"]["best_epoch"]
                if monitored in panel and best_epoch is not None:
                    best = next(r for r in run.metrics if r["epoch"] == best_epoch)
                    stars.append((run.run_id, float(one_based(best_epoch)), float(best[monitored]), style["color"]))
        _focus_after_first_epoch(ax, [y for _, _, y, _ in stars], named=len(panel) > 1)
        for run_id, x, y, color in stars:
            # Above every curve and marker, so no other run's line hides a run's best checkpoint.
            ax.plot([x], [y], marker="*", markersize=14, color=color, markeredgecolor="white",
                    markeredgewidth=0.8, linestyle="", zorder=STAR_ZORDER, gid=f"best|{run_id}")  # fmt: skip
        ax.set_xlabel("epoch")
        ax.set_ylabel(" / ".join(label(m) for m in panel) if len(panel) == 1 else "loss")
        ax.set_title(", ".join(label(m) for m in panel))
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    handles = [
        Line2D([], [], color=styles[g.name]["color"], marker=styles[g.name]["marker"], markersize=5,
               label=g.name if len(g.runs) == 1 else f"{g.name} (mean of {len(g.runs)} seeds)")
        for g in groups
    ]  # fmt: skip
    if any(len(g.runs) > 1 for g in groups):
        handles.append(Patch(facecolor="0.3", alpha=0.18, label="range over seeds"))
    if any(len(panel) > 1 for panel in panels):
        handles += [
            Line2D([], [], color="0.3", linestyle="-", label="train"),
            Line2D([], [], color="0.3", linestyle="--", label="validation"),
        ]
    if any(line.get_gid() and str(line.get_gid()).startswith("best|") for ax in axes for line in ax.lines):
        monitored = sorted({run.monitor["metric"] for run in runs})
        star = f"best {', '.join(monitored)}" + (" (each run)" if any(len(g.runs) > 1 for g in groups) else "")
        handles.append(Line2D([], [], color="0.3", marker="*", linestyle="", markersize=10, label=star))
    if any(str(line.get_gid()).startswith("offscale|") for ax in axes for line in ax.lines):
        arrow = Line2D([], [], color="0.3", marker="^", linestyle="", markersize=6, label="first epoch, off scale")
        handles.append(arrow)
    legend_below(fig, handles, 5)
    return fig


def _batch(run: Run, config: Mapping[str, Any]) -> float:
    """Samples per batch per rank as training counted them (a DataModule of the user's own may ignore
    trainer.batch_size); runs recorded before batches were counted have only the config's."""
    counted = next((r for r in run.metrics if r.get("batches")), None)
    return counted["samples"] / counted["batches"] if counted else config["trainer.batch_size"]


def scaling_points(runs: Sequence[Run], params: Sequence[str]) -> list[dict[str, Any]]:
    """Throughput and efficiency per run, relative to the smallest world size of the same configuration.

    Runs form one series per value of the varying parameters other than nodes and devices, so a
    sweep over learning rate x devices gives one scaling line per learning rate.
    """
    series_keys = [k for k in params if k not in LAYOUT_KEYS]
    points = []
    for run in runs:
        measured = steady_throughput(run)
        if measured is None:
            continue
        # provenance's launch record: the world size the run had, not the config's launch section.
        config, launched = flatten(run.provenance["config"]), run.provenance["launch"]
        label = ", ".join(f"{k.rsplit('.', 1)[-1]}={config.get(k)}" for k in series_keys) or "all runs"
        points.append(
            {
                "run": run.run_id,
                "series": label,
                "world_size": launched["world_size"],
                "nodes": launched["nodes"],
                "devices": launched["processes_per_node"],
                "throughput": measured[0],
                "low": measured[1],
                "high": measured[2],
                # One optimizer step: every rank's batch, at the measured rate.
                "step_ms": 1e3 * _batch(run, config) * launched["world_size"] / measured[0],
            }
        )
    for label in {p["series"] for p in points}:
        members = sorted((p for p in points if p["series"] == label), key=lambda p: p["world_size"])
        base = members[0]
        for p in members:
            p["ideal"] = base["throughput"] * p["world_size"] / base["world_size"]
            p["efficiency"] = p["throughput"] / p["ideal"]
    return points


# Below this scaling efficiency the page says why more processes did not help.
FLAT_EFFICIENCY = 0.75


def why_flat(points: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """The worst efficiency and the step time of its series' smallest run, when more processes barely helped.

    A step that takes about a millisecond is mostly costs that more processes do not divide (the
    gradient all-reduce, the training loop's own work per step); on one node the processes also
    share its cores. The page says so rather than leave a low efficiency unexplained.
    """
    scaled = [p for p in points if p["efficiency"] < FLAT_EFFICIENCY and p["ideal"] != p["throughput"]]
    if not scaled:
        return None
    worst = min(scaled, key=lambda p: p["efficiency"])
    base = min((p for p in points if p["series"] == worst["series"]), key=lambda p: p["world_size"])
    return {"efficiency": worst["efficiency"], "step_ms": base["step_ms"], "world_size": worst["world_size"]}


def scaling(runs: Sequence[Run], params: Sequence[str]) -> Figure:
    """Throughput vs world size as bars (measured, and the gap to perfect linear scaling), and efficiency."""
    points = scaling_points(runs, params)
    series = sorted({p["series"] for p in points})
    cmap = colormaps["tab10"]
    colors = {label: matplotlib.colors.to_hex(cmap(i % cmap.N)) for i, label in enumerate(series)}
    layouts = sorted({(p["world_size"], p["nodes"], p["devices"]) for p in points})
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    bars, eff = fig.subplots(1, 2)
    width = 0.8 / len(series)
    for i, label in enumerate(series):
        members = sorted((p for p in points if p["series"] == label), key=lambda p: p["world_size"])
        for p in members:
            x = layouts.index((p["world_size"], p["nodes"], p["devices"])) - 0.4 + width * (i + 0.5)
            bars.bar(x, p["ideal"], width * 0.9, facecolor="none", edgecolor=colors[label], hatch="//", alpha=0.5)
            bars.patches[-1].set_gid(f"ideal|{p['run']}")
            # The whisker spans the epochs' range; bar_label puts the value above the whisker's top,
            # so no whisker crosses a label, and the white box keeps it readable over the hatching.
            measured = bars.bar(
                x, p["throughput"], width * 0.9, color=colors[label],
                yerr=[[p["throughput"] - p["low"]], [p["high"] - p["throughput"]]],
                error_kw={"ecolor": "0.15", "elinewidth": 1.2, "capsize": 0},
            )  # fmt: skip
            measured.patches[0].set_gid(f"throughput|{p['run']}")
            measured.errorbar.lines[2][0].set_gid(f"range|{p['run']}")
            (value,) = bars.bar_label(
                measured, [f"{p['throughput']:,.0f}"], padding=3, fontsize=8, fontweight="bold",
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
            )  # fmt: skip
            value.set_gid(f"value|{p['run']}")
        eff.plot(
            [p["world_size"] for p in members],
            [100 * p["efficiency"] for p in members],
            marker="o",
            color=colors[label],
            label=label,
            gid=f"efficiency|{label}",
        )
        for p in members:
            eff.annotate(
                f"{100 * p['efficiency']:.0f}%", (p["world_size"], 100 * p["efficiency"]), xytext=(4, 4),
                textcoords="offset points", fontsize=8, color=colors[label],
            )  # fmt: skip
    bars.set_xticks(range(len(layouts)), [f"{w}\n({n} node x {d})" for w, n, d in layouts])
    bars.set_xlabel("world size (nodes x processes per node)")
    bars.set_ylabel("samples/s, all ranks (median of epochs after the first)")
    bars.set_title("Training throughput")
    bars.grid(axis="y", alpha=0.3)
    bars.set_ylim(0, 1.15 * max(max(p["ideal"], p["high"]) for p in points))
    legend = [Patch(facecolor=colors[label], label=label) for label in series]
    legend.append(Patch(facecolor="none", edgecolor="0.4", hatch="//", label="perfect linear scaling"))
    bars.legend(handles=legend, fontsize=8, loc="upper left")
    sizes = sorted({p["world_size"] for p in points})
    eff.axhline(100, color="0.5", linestyle="--", linewidth=1, label="ideal (100%)")
    eff.set_xticks(sizes)
    eff.set_xlabel("world size (processes)")
    eff.set_ylabel("scaling efficiency (%)")
    eff.set_ylim(0, max(110, *(100 * p["efficiency"] + 10 for p in points)))
    eff.set_title("Scaling efficiency")
    eff.grid(alpha=0.3)
    eff.legend(fontsize=8, loc="lower left")
    return fig


# Goodput's buckets (run.account) in the account figure: productive green, each kind of overhead its own hue,
# what was lost to a disruption red, other grey; the same on every platform.
BUCKET_COLOURS = {
    "productive_s": "#2ca02c",
    "accelerator_init_s": "#9467bd",
    "program_startup_s": "#1f77b4",
    "data_loading_s": "#17becf",
    "checkpoint_save_s": "#ff7f0e",
    "checkpoint_restore_s": "#bcbd22",
    "disruption_lost_s": "#d62728",
    "other_s": "#7f7f7f",
}


def _account_of(run: Run) -> dict[str, Any]:
    return (run.provenance["timing"].get("goodput") or {}).get("account") or {}


def account(runs: Sequence[Run]) -> Figure:
    """Where each run's wall time went, all its tries together: one stacked bar per run, a segment per bucket
    (``account|<run>|<bucket>``, its height the seconds), the run's GPU-hours and queue wait under its name
    ("not known" where the platform cannot tell). A run recorded before accounts were kept has no bar."""
    fig = Figure(figsize=(max(5.0, 1.1 * len(runs) + 2.5), 4.2), layout="constrained")
    ax = fig.add_subplot()
    names = []
    for x, run in enumerate(runs):
        kept = _account_of(run)
        wait = kept.get("queue_wait_s")
        names.append(
            f"{run.label}\n{kept['gpu_hours']:.3g} GPU-h, queue {'not known' if wait is None else f'{wait:.0f} s'}"
            if kept
            else f"{run.label}\n(not recorded)"
        )
        bottom = 0.0
        for bucket, colour in BUCKET_COLOURS.items():
            seconds = (kept.get("buckets") or {}).get(bucket)
            if seconds is None:
                continue
            (bar,) = ax.bar(x, seconds, bottom=bottom, color=colour, width=0.6)
            bar.set_gid(f"account|{run.label}|{bucket}")
            bottom += seconds
    ax.set_xticks(range(len(runs)), names, fontsize=8)
    ax.set_ylabel("seconds, all tries")
    ax.set_title("Where each run's wall time went (Goodput's buckets)", fontsize=10)
    handles = [Patch(color=colour, label=bucket.removesuffix("_s").replace("_", " ")) for bucket, colour in
               BUCKET_COLOURS.items()]  # fmt: skip
    legend_below(fig, handles, 4)
    return fig


def _finite(values: Any) -> list[float | None]:
    return [float(v) if math.isfinite(float(v)) else None for v in values]


def _band(band: PolyCollection) -> dict[str, list[float]]:
    """A band's outline as its lower and upper bound at each x (fill_between draws one polygon per
    stretch without gaps)."""
    bounds: dict[float, list[float]] = {}
    for path in band.get_paths():
        for x, y in path.vertices:
            bounds.setdefault(float(x), []).append(float(y))
    xs = sorted(bounds)
    return {"x": xs, "low": [min(bounds[x]) for x in xs], "high": [max(bounds[x]) for x in xs]}


def plotted_legends(fig: Figure) -> list[dict[str, Any]]:
    """Each legend as the saved figure drew it: its entries' labels, colours and markers, and its box in figure
    fractions (0 to 1 on both axes where nothing of it was cut off)."""
    found = []
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]:
        box = legend.get_window_extent().transformed(fig.transFigure.inverted())
        entries = []
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            color = handle.get_color() if isinstance(handle, Line2D) else handle.get_facecolor()
            marker = handle.get_marker() if isinstance(handle, Line2D) else None
            entries.append({"label": text.get_text(), "color": matplotlib.colors.to_hex(color), "marker": marker})
        found.append({"entries": entries, "box": [round(float(v), 4) for v in (box.x0, box.y0, box.x1, box.y1)]})
    return found


def plotted_series(fig: Figure) -> list[dict[str, Any]]:
    """The numbers the figure draws, read back from its artists (only those with a gid)."""
    series = []
    for ax in fig.axes:
        for line in ax.lines:
            if line.get_gid():
                drawn = {"x": _finite(line.get_xdata()), "y": _finite(line.get_ydata())}
                series.append({"gid": line.get_gid(), **drawn, "color": matplotlib.colors.to_hex(line.get_color())})
        for patch in ax.patches:
            if isinstance(patch, Rectangle) and patch.get_gid():
                series.append(
                    {"gid": patch.get_gid(), "x": patch.get_x() + patch.get_width() / 2, "height": patch.get_height()}
                )
        for collection in ax.collections:
            if isinstance(collection, LineCollection) and collection.get_gid():
                series.append({"gid": collection.get_gid(), "segments": collection.get_segments()[0].tolist()})
            if isinstance(collection, PolyCollection) and collection.get_gid():
                series.append({"gid": collection.get_gid(), **_band(collection)})
    return series


def write(fig: Figure, path: str | Path, fmt: str, dpi: int, series_path: str | Path) -> None:
    """Save the figure (png or svg) and, beside it, the series it plots as JSON."""
    buffer = BytesIO()
    # A fixed date and no hash salt keep SVG output identical for identical numbers.
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}
    with matplotlib.rc_context({"svg.hashsalt": "snakeddp"}):
        fig.savefig(buffer, format=fmt, dpi=dpi, metadata=metadata)
    atomic_write_bytes(path, buffer.getvalue())
    atomic_write_json(
        series_path, {"figure": Path(path).name, "series": plotted_series(fig), "legends": plotted_legends(fig)}
    )
