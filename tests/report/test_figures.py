"""The report's figures plot the measured numbers: series read back from the drawn artists vs metrics.csv."""

from __future__ import annotations

import csv
import json
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.transforms import Bbox

from snakeddp.report import figures
from snakeddp.report.table import varying_params
from snakeddp.run.runs import find_runs

pytestmark = pytest.mark.e2e
RUNS = ("devices-1", "devices-2")
# The sweep's runs differ in launch.devices only: each is a configuration of one seed.
CONFIGURATION = {"devices-1": "devices=1", "devices-2": "devices=2"}


def metrics_csv(results: Path, run: str) -> list[dict[str, str]]:
    with (results / "runs" / run / "metrics.csv").open() as handle:
        return list(csv.DictReader(handle))


def by_gid(series: list[dict]) -> dict[str, dict]:
    return {s["gid"]: s for s in series}


def expected_curves(results: Path, metrics: tuple[str, ...]) -> dict[str, tuple[list[float], list[float]]]:
    expected = {}
    for run in RUNS:
        rows = metrics_csv(results, run)
        for metric in metrics:
            xs = [float(r["epoch"]) + 1 for r in rows]  # epochs counted from 1
            expected[f"curve|{CONFIGURATION[run]}|{metric}"] = (xs, [float(r[metric]) for r in rows])
    return expected


def assert_curves_match(series: list[dict], expected: dict) -> None:
    plotted = {gid: s for gid, s in by_gid(series).items() if gid.startswith("curve|")}
    assert set(plotted) == set(expected)
    for gid, (xs, ys) in expected.items():
        assert plotted[gid]["x"] == xs, gid
        assert plotted[gid]["y"] == pytest.approx(ys, rel=1e-9), gid


def test_curves_figure_plots_metrics_csv(sweep_workflow):
    results = sweep_workflow.directory / "results"
    series = json.loads((results / "report/plots/curves.json").read_text())["series"]
    assert_curves_match(series, expected_curves(results, ("train_loss", "val_loss", "val_acc")))
    assert (results / "report/plots/curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scaling_figure_plots_throughput_and_efficiency(sweep_workflow):
    results = sweep_workflow.directory / "results"
    plotted = by_gid(json.loads((results / "report/plots/scaling.json").read_text())["series"])
    # Steady-state throughput: median samples/s of the epochs after the first, from metrics.csv.
    throughput = {
        run: statistics.median(float(r["samples_per_s"]) for r in metrics_csv(results, run)[1:]) for run in RUNS
    }
    for run in RUNS:
        assert plotted[f"throughput|{run}"]["height"] == pytest.approx(throughput[run], rel=1e-9)
    assert plotted["ideal|devices-2"]["height"] == pytest.approx(2 * throughput["devices-1"], rel=1e-9)
    for run in RUNS:
        # The whisker spans the steady epochs' range.
        steady = [float(r["samples_per_s"]) for r in metrics_csv(results, run)[1:]]
        (x, low), (_, high) = plotted[f"range|{run}"]["segments"]
        assert (low, high) == pytest.approx((min(steady), max(steady)), rel=1e-9)
        assert x == pytest.approx(plotted[f"throughput|{run}"]["x"])
    efficiency = plotted["efficiency|all runs"]
    assert efficiency["x"] == [1.0, 2.0]
    assert efficiency["y"] == pytest.approx([100.0, 100 * throughput["devices-2"] / (2 * throughput["devices-1"])])


def test_figure_series_come_from_the_drawn_artists(sweep_workflow, tmp_path):
    """Drawn in-process as SVG with other metrics: the series read back still equal metrics.csv."""
    results = sweep_workflow.directory / "results"
    metrics = ("val_loss", "samples_per_s", "data_wait_s")
    fig = figures.curves(find_runs(results), metrics)
    figures.write(fig, tmp_path / "c.svg", "svg", 100, tmp_path / "c.json")
    assert_curves_match(json.loads((tmp_path / "c.json").read_text())["series"], expected_curves(results, metrics))
    root = ET.parse(tmp_path / "c.svg").getroot()
    assert root.tag.endswith("svg")
    # One axes per panel: val_loss, samples_per_s, data_wait_s.
    assert len(fig.axes) == 3


def test_a_wrong_number_is_caught(sweep_workflow):
    """The comparison above would notice a plot of other numbers (here, another run's losses)."""
    results = sweep_workflow.directory / "results"
    runs = find_runs(results)
    runs[0].metrics[:] = runs[1].metrics
    series = figures.plotted_series(figures.curves(runs, ("train_loss",)))
    with pytest.raises(AssertionError):
        assert_curves_match(series, expected_curves(results, ("train_loss",)))


def loss_axes(fig):
    return next(ax for ax in fig.axes if any(str(line.get_gid()).endswith("|val_loss") for line in ax.lines))


def test_best_checkpoint_star_is_drawn_above_every_curve(sweep_workflow):
    runs = find_runs(sweep_workflow.directory / "results")
    ax = loss_axes(figures.curves(runs, ("train_loss", "val_loss", "val_acc")))
    stars = {line.get_gid(): line for line in ax.lines if line.get_gid().startswith("best|")}
    assert set(stars) == {f"best|{run.run_id}" for run in runs}
    others = max(line.get_zorder() for line in ax.lines if not line.get_gid().startswith("best|"))
    for run in runs:
        star = stars[f"best|{run.run_id}"]
        assert star.get_zorder() > others
        training = run.provenance["training"]
        assert (star.get_xdata()[0], star.get_ydata()[0]) == (training["best_epoch"] + 1, training["best_val_loss"])


def test_a_first_epoch_that_squashes_the_loss_panel_is_drawn_at_its_edge(sweep_workflow):
    results = sweep_workflow.directory / "results"
    runs = find_runs(results)
    # The sweep's own first epoch does not squash its panel: the scale covers every point.
    ax = loss_axes(figures.curves(runs, ("train_loss", "val_loss")))
    assert not [line for line in ax.lines if line.get_gid().startswith("offscale|")]
    low, high = ax.get_ylim()
    assert all(low <= y <= high for line in ax.lines for y in line.get_ydata())
    # A first epoch ten times the rest: the scale fits the later epochs, the first is an arrow with its number.
    for run in runs:
        run.metrics[0].update(train_loss=10 * run.metrics[0]["train_loss"], val_loss=10 * run.metrics[0]["val_loss"])
    fig = figures.curves(runs, ("train_loss", "val_loss"))
    ax = loss_axes(fig)
    low, high = ax.get_ylim()
    later = [r[m] for run in runs for r in run.metrics[1:] for m in ("train_loss", "val_loss")]
    assert low <= min(later) and max(later) <= high < min(run.metrics[0]["train_loss"] for run in runs)
    arrows = {line.get_gid(): line for line in ax.lines if line.get_gid().startswith("offscale|")}
    labels = {text.get_text() for text in ax.texts}
    for run in runs:
        for metric in ("train_loss", "val_loss"):
            arrow = arrows[f"offscale|{CONFIGURATION[run.run_id]}|{metric}"]
            assert (arrow.get_xdata()[0], arrow.get_ydata()[0]) == (1, high)
            assert f"{metric.split('_')[0]} {run.metrics[0][metric]:.3g}" in labels
    # The curves still carry every measured number, the first epoch included.
    expected = {f"curve|{CONFIGURATION[r.run_id]}|{m}": ([x["epoch"] + 1.0 for x in r.metrics],
                                                         [x[m] for x in r.metrics])
                for r in runs for m in ("train_loss", "val_loss")}  # fmt: skip
    assert_curves_match(figures.plotted_series(fig), expected)


def figure_box(fig, box: Bbox) -> Bbox:
    return box.transformed(fig.transFigure.inverted())


def test_value_labels_stay_clear_of_the_whiskers(sweep_workflow):
    """In figure coordinates, no value label's box meets a whisker, even where an epoch's range is wide."""
    runs = find_runs(sweep_workflow.directory / "results")
    # Widen devices-2's range far below and above its median, where a label centred in the bar would sit.
    steady = runs[1].metrics[1:]
    median = statistics.median(r["samples_per_s"] for r in steady)
    steady[0]["samples_per_s"], steady[-1]["samples_per_s"] = 0.05 * median, 1.9 * median
    fig = figures.scaling(runs, varying_params([run.provenance for run in runs]))
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    ax = fig.axes[0]
    labels = [t for t in ax.texts if str(t.get_gid()).startswith("value|")]
    whiskers = [c for c in ax.collections if str(c.get_gid()).startswith("range|")]
    assert len(labels) == len(whiskers) == len(runs)
    for label in labels:
        box = figure_box(fig, Bbox.union([label.get_window_extent(renderer),
                                          label.get_bbox_patch().get_window_extent(renderer)]))  # fmt: skip
        for whisker in whiskers:
            (x, y0), (_, y1) = figure_box(fig, Bbox(ax.transData.transform(whisker.get_segments()[0]))).get_points()
            crosses = box.x0 <= x <= box.x1 and min(y0, y1) <= box.y1 and box.y0 <= max(y0, y1)
            assert not crosses, (label.get_text(), whisker.get_gid())


def point(run: str, world_size: int, throughput: float, ideal: float, step_ms: float) -> dict:
    return {"run": run, "series": "all runs", "world_size": world_size, "throughput": throughput,
            "ideal": ideal, "efficiency": throughput / ideal, "step_ms": step_ms}  # fmt: skip


def test_the_page_says_why_more_processes_barely_helped():
    flat = [point("devices-1", 1, 1000.0, 1000.0, 1.3), point("devices-2", 2, 1100.0, 2000.0, 2.3)]
    assert figures.why_flat(flat) == {"efficiency": 0.55, "step_ms": 1.3, "world_size": 2}
    scaled = [point("devices-1", 1, 1000.0, 1000.0, 40.0), point("devices-2", 2, 1900.0, 2000.0, 42.0)]
    assert figures.why_flat(scaled) is None


def test_step_time_is_every_ranks_batch_as_counted_in_training_at_the_measured_rate(sweep_workflow):
    runs = find_runs(sweep_workflow.directory / "results")
    points = figures.scaling_points(runs, varying_params([r.provenance for r in runs]))
    assert [(p["run"], p["world_size"]) for p in points] == [("devices-1", 1), ("devices-2", 2)]
    for p in points:
        run = next(r for r in runs if r.run_id == p["run"])
        first = run.metrics[0]
        # 150 records per rank in batches of 32: the last batch of each epoch holds 22, so a step
        # averages 30 samples, not trainer.batch_size's 32.
        batch = first["samples"] / first["batches"]
        assert batch < run.provenance["config"]["trainer"]["batch_size"]
        assert p["step_ms"] == pytest.approx(1e3 * batch * p["world_size"] / p["throughput"])


def test_account_figure_stacks_each_runs_buckets_as_its_provenance_holds_them(sweep_workflow):
    results = sweep_workflow.directory / "results"
    drawn = json.loads((results / "report/plots/account.json").read_text())
    bars = {s["gid"]: s["height"] for s in drawn["series"] if s["gid"].startswith("account|")}
    for run in RUNS:
        record = json.loads((results / "runs" / run / "provenance.json").read_text())
        buckets = record["timing"]["goodput"]["account"]["buckets"]
        assert {name: bars[f"account|{run}|{name}"] for name in buckets} == pytest.approx(buckets)
        assert sum(buckets.values()) == pytest.approx(record["timing"]["goodput"]["seconds"], abs=0.01)
    (legend,) = drawn["legends"]
    labels = [entry["label"] for entry in legend["entries"]]
    assert labels[0] == "productive" and labels[-2:] == ["disruption lost", "other"] and len(labels) == 8
    assert all(0 <= value <= 1 for value in legend["box"])  # nothing of it cut off
