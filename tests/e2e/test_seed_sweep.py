"""A sweep of 4 learning rates x 2 seeds through the real pipeline: configurations.csv, the page's
configurations table with mean ± spread, and the metric-vs-lr figure, as headless Chromium renders them; each
configuration in one colour and marker in the table and in every figure."""

from __future__ import annotations

import csv
import json
import re
import statistics

import pytest

from snakeddp.report import configurations, tuning
from snakeddp.run.runs import find_runs
from snakeddp.util.numbers import readable
from tests.chromium import chromium, console_errors, table_rows
from tests.helpers import TINY, Workflow

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kept_warm")]
# Two decades apart: the figure's lr axis is logarithmic. Listed largest first, the sweep's order, while the page
# lists runs by id (lr-0.003 first): a colour dealt in the order runs are handed over differed between the two.
LRS = (0.3, 0.03, 0.01, 0.003)
CONFIGURATIONS = {f"lr={lr}": [f"lr-{lr}_seed-{seed}" for seed in (1, 2)] for lr in LRS}


@pytest.fixture(scope="module")
def flow(tmp_path_factory) -> Workflow:
    flow = Workflow(tmp_path_factory.mktemp("seeds"))
    flow.write_config({**TINY, "sweep": {"model.lr": list(LRS), "seed": [1, 2]}})
    flow.run()
    return flow


def read_csv(path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def scores(flow) -> dict[str, float]:
    return {run.run_id: run.best_score for run in find_runs(flow.directory / "results")}


def test_configurations_csv_holds_each_learning_rates_mean_spread_and_seed_count(flow):
    rows = {row["configuration"]: row for row in read_csv(flow.directory / "results/report/configurations.csv")}
    assert set(rows) == set(CONFIGURATIONS)
    score = scores(flow)
    for name, runs in CONFIGURATIONS.items():
        row, values = rows[name], [score[run] for run in runs]
        assert (row["seeds"], row["runs"], row["monitor"]) == ("2", " ".join(runs), "val_loss (min)")
        assert float(row["param:model.lr"]) == float(name.removeprefix("lr="))
        assert float(row["best_score:mean"]) == pytest.approx(statistics.mean(values), rel=1e-12)
        assert float(row["best_score:sample_std"]) == pytest.approx(statistics.stdev(values), rel=1e-12)
    runs_csv = read_csv(flow.directory / "results/report/runs.csv")
    assert {(row["param:model.lr"], row["param:seed"]) for row in runs_csv} == {
        (str(lr), str(seed)) for lr in LRS for seed in (1, 2)
    }, "every swept key is a column of runs.csv"


def test_the_hyperparameter_figure_plots_the_means_against_a_log_lr_axis(flow):
    series = json.loads((flow.directory / "results/report/plots/hyperparameters.json").read_text())["series"]
    points = {s["gid"]: s for s in series if s["gid"].startswith("mean|")}
    score = scores(flow)
    assert set(points) == {f"mean|model.lr|{name}" for name in CONFIGURATIONS}
    for name, runs in CONFIGURATIONS.items():
        assert points[f"mean|model.lr|{name}"]["y"] == pytest.approx([statistics.mean(score[r] for r in runs)])
    figure = tuning.tuning(find_runs(flow.directory / "results"), ["model.lr"])
    assert figure.axes[0].get_xscale() == "log"


def test_chromium_shows_the_configurations_table_and_the_metric_vs_lr_figure(flow, tmp_path):
    report = flow.directory / "results/report/report.html"
    dom = chromium(report, tmp_path / "profile-dom", "--dump-dom")
    assert not console_errors(dom.stderr)
    labels, rows = table_rows(dom.stdout, "configurations-table")
    assert labels[:3] == ["configuration", "model.lr", "seeds"] and labels[3] == "best val_loss (mean ± sd)"
    groups = {g.name: g for g in configurations.group(find_runs(flow.directory / "results"))}
    assert {row[0] for row in rows} == set(CONFIGURATIONS)
    for row in rows:
        score = groups[row[0]].score
        assert row[2] == "2" and row[3] == f"{readable(score.mean)} ± {readable(score.std)}"
    best = configurations.ranked(list(groups.values()))[0]
    card = re.search(r'id="card-best">(.*?)</div></div>', dom.stdout, re.S).group(1)
    assert best.name in card and "mean ± sd of 2 seeds" in card
    # The figure decodes in Chromium: a probe copy (with a script the page itself has no need of)
    # records the image's decoded size and the configurations table's rendered height.
    probe = tmp_path / "probe.html"
    script = (
        "<script>addEventListener('load', () => { const img = document.getElementById('figure-tuning');"
        "img.setAttribute('data-decoded', img.naturalWidth + 'x' + img.naturalHeight);"
        "const t = document.getElementById('configurations-table');"
        "t.setAttribute('data-height', Math.round(t.getBoundingClientRect().height)); });</script>"
    )
    text = report.read_text().replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';")
    probe.write_text(text.replace("</body>", script + "</body>"))
    probed = chromium(probe, tmp_path / "profile-probe", "--dump-dom", "--virtual-time-budget=5000").stdout
    decoded = re.search(r'id="figure-tuning"[^>]*data-decoded="(\d+)x(\d+)"', probed)
    assert decoded and int(decoded.group(1)) > 300 and int(decoded.group(2)) > 200, decoded
    height = re.search(r'id="configurations-table"[^>]*data-height="(\d+)"', probed)
    assert height and int(height.group(1)) > 80, "a header and four rows, drawn"
    chromium(report, tmp_path / "profile-shot", "--window-size=1400,1600", f"--screenshot={tmp_path / 'page.png'}")
    assert (tmp_path / "page.png").stat().st_size > 20_000


def test_a_configuration_has_one_colour_in_the_table_and_every_figure_and_no_legend_is_cut(flow, tmp_path):
    """The table's swatches as Chromium renders the page, against each figure's legend and the points it drew
    (read back from the saved figures' artists: plots/*.json)."""
    dom = chromium(flow.directory / "results/report/report.html", tmp_path / "profile", "--dump-dom").stdout
    swatches = dict(
        (name, color.lower())
        for color, name in re.findall(
            r'<tr data-configuration="[^"]*"[^>]*><td><span class="swatch" style="background: ([^"]+)"></span>([^<]+)',
            dom,
        )
    )
    assert set(swatches) == set(CONFIGURATIONS) and len(set(swatches.values())) == len(CONFIGURATIONS), swatches
    plots = flow.directory / "results/report/plots"
    for figure in ("curves", "hyperparameters"):
        drawn = json.loads((plots / f"{figure}.json").read_text())
        (legend,) = drawn["legends"]
        named = [(e["label"].split(" (")[0], e) for e in legend["entries"]]
        legend_colors = {name: e["color"] for name, e in named if name in CONFIGURATIONS}
        assert legend_colors == swatches, figure
        markers = [e["marker"] for e in legend["entries"] if e["label"].split(" (")[0] in swatches]
        assert len(set(markers)) == len(CONFIGURATIONS), (figure, markers)
        x0, y0, x1, y1 = legend["box"]
        assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1, f"{figure}: the legend is cut off ({legend['box']})"
    series = json.loads((plots / "hyperparameters.json").read_text())["series"]
    for name in CONFIGURATIONS:
        (point,) = [s for s in series if s["gid"] == f"mean|model.lr|{name}"]
        assert point["color"] == swatches[name], name
