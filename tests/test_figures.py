"""The report's figures plot the measured numbers: series read back from the drawn artists vs metrics.csv."""

from __future__ import annotations

import csv
import json
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from snakeddp.report import figures
from snakeddp.report.runs import find_runs

pytestmark = pytest.mark.e2e
RUNS = ("devices-1", "devices-2")


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
            expected[f"curve|{run}|{metric}"] = ([float(r["epoch"]) for r in rows], [float(r[metric]) for r in rows])
    return expected


def assert_curves_match(series: list[dict], expected: dict) -> None:
    plotted = by_gid(series)
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
    efficiency = plotted["efficiency|all runs"]
    assert efficiency["x"] == [1.0, 2.0]
    assert efficiency["y"] == pytest.approx([100.0, 100 * throughput["devices-2"] / (2 * throughput["devices-1"])])


def test_figure_series_come_from_the_drawn_artists(sweep_workflow, tmp_path):
    """Drawn in-process as SVG with other metrics: the series read back still equal metrics.csv."""
    results = sweep_workflow.directory / "results"
    metrics = ("val_loss", "samples_per_s", "data_wait_s")
    fig = figures.curves(find_runs(results), metrics)
    figures.write(fig, tmp_path / "c.svg", "svg", 100, tmp_path / "c.json")
    assert_curves_match(figures.read_series(tmp_path / "c.json"), expected_curves(results, metrics))
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


def test_no_scaling_without_layout_change(sweep_workflow):
    runs = find_runs(sweep_workflow.directory / "results")
    assert figures.varies_layout(runs)
    assert not figures.varies_layout(runs[:1])
