"""report.html: self-contained, and rendered by headless Chromium with every run and figure."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import statistics
from pathlib import Path

import pytest
from matplotlib import image

from snakeddp.provenance import schema
from snakeddp.report import figures, html
from snakeddp.report.table import THROUGHPUT_MEANS, varying_params
from snakeddp.run.runs import Run, find_runs, read_metrics
from snakeddp.util.numbers import disk_size, readable
from tests.chromium import chromium, console_errors, table_rows

pytestmark = pytest.mark.e2e
RUNS = ("devices-1", "devices-2")


@pytest.fixture(scope="module")
def report(sweep_workflow) -> Path:
    return sweep_workflow.directory / "results/report/report.html"


def test_page_is_self_contained(report):
    text = report.read_text()
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert "<script" not in text
    for attribute in re.findall(r'(?:src|href)="([^"]*)"', text):
        assert attribute.startswith(
            ("data:image/", "#", "runs.csv", "configurations.csv", "ro-crate-metadata.json", "files/")
        ), attribute
    assert (report.parent / "ro-crate-metadata.json").is_file()
    assert all((report.parent / f"files/runs/{run}/provenance.json").is_file() for run in RUNS)


def test_embedded_figures_are_the_plot_files(report):
    text = report.read_text()
    for name in ("curves", "scaling", "account"):
        data = re.search(rf'id="figure-{name}" alt="[^"]*" src="data:image/png;base64,([^"]+)"', text).group(1)
        assert base64.b64decode(data) == (report.parent / f"plots/{name}.png").read_bytes()


def test_chromium_renders_every_run_and_figure(report, tmp_path):
    dom = chromium(report, tmp_path / "profile-dom", "--dump-dom")
    assert not console_errors(dom.stderr)
    for run in RUNS:
        assert f'<tr id="row-{run}" data-run="{run}"' in dom.stdout
        assert f'<details id="run-{run}"' in dom.stdout
    assert all(f'id="figure-{name}"' in dom.stdout for name in ("curves", "scaling", "account"))
    shot = tmp_path / "report.png"
    chromium(report, tmp_path / "profile-shot", "--window-size=1400,3000", f"--screenshot={shot}")
    pixels = image.imread(shot)
    assert pixels.shape[:2] == (3000, 1400)
    # Not a blank page: dark header, figures and text leave many distinct colours.
    assert len({tuple(p) for p in pixels[::7, ::7, :3].reshape(-1, 3).round(2).tolist()}) > 50


def test_chromium_decodes_the_figures(report, tmp_path):
    """A probe copy (with a script the real page has no need of) records each image's decoded size."""
    probe = tmp_path / "probe.html"
    script = (
        "<script>addEventListener('load', () => { for (const img of document.images) "
        "img.setAttribute('data-decoded', img.naturalWidth + 'x' + img.naturalHeight); });</script>"
    )
    text = report.read_text().replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';")
    probe.write_text(text.replace("</body>", script + "</body>"))
    dom = chromium(probe, tmp_path / "profile", "--dump-dom", "--virtual-time-budget=5000").stdout
    for name in ("curves", "scaling", "account"):
        height, width = image.imread(report.parent / f"plots/{name}.png").shape[:2]
        assert re.search(rf'id="figure-{name}"[^>]*data-decoded="{width}x{height}"', dom), name


def test_samples_per_s_is_one_number_named_alike(report):
    """The runs table and the scaling table show the same samples/s per run, the one the page defines."""
    text = report.read_text()
    runs_labels, runs_rows = table_rows(text, "runs-table")
    scaling_labels, scaling_rows = table_rows(text, "scaling-table")
    runs_rate = {row[0]: row[runs_labels.index("samples/s")] for row in runs_rows}
    scaling_rate = {row[0]: row[scaling_labels.index("samples/s")] for row in scaling_rows}
    assert set(runs_rate) == set(RUNS) and runs_rate == scaling_rate
    for run in RUNS:
        rows = read_metrics(report.parents[1] / "runs" / run / "metrics.csv")
        assert runs_rate[run] == readable(statistics.median(row["samples_per_s"] for row in rows[1:]))
    assert text.count(THROUGHPUT_MEANS) == 2  # said beside the runs table and under the scaling figure


def test_times_are_named_for_what_they_measure(report):
    text = report.read_text()
    assert "training time" not in text.lower()
    card = re.search(r'<div class="card" id="card-time"><div class="label">(.*?)</div>', text).group(1)
    assert card == "training processes' wall time"  # every run records timing.phases
    labels, rows = table_rows(text, "time-table")
    assert labels[:3] == ["run", "trainer.fit s, last try", "training loops s, every epoch"]
    for row in rows:
        timing = json.loads((report.parents[1] / "runs" / row[0] / "provenance.json").read_text())["timing"]
        assert row[1:3] == [readable(timing["duration_s"]), readable(timing["train_seconds"])]
    # Records made before timing.phases: the card names trainer.fit, whose time they do record.
    runs = find_runs(report.parents[1])
    for run in runs:
        del run.provenance["timing"]["phases"]
    card = re.search(r'<div class="card" id="card-time"><div class="label">(.*?)</div>', render(runs, report))
    assert card.group(1) == "time in trainer.fit"


def test_checkpoint_sizes_are_in_the_units_prune_says_them(report):
    """The page said every checkpoint in KiB (a 2 GB one as 1953125.0 KiB) where `snakeddp prune` says kB, MB, GB:
    three checkpoints of 85.0 KiB were "261.0 kB" freed."""
    text = report.read_text()
    assert " KiB<" not in text
    for run in find_runs(report.parents[1]):
        for checkpoint in run.provenance["training"]["checkpoints"]:
            assert f'<td class="num">{disk_size(checkpoint["bytes"])}</td>' in text, checkpoint


def render(runs, report: Path) -> str:
    plots = report.parent / "plots"
    return html.render(runs, {"title": "t", "metrics": ["val_loss"]}, plots / "curves.png", plots / "scaling.png")


def test_a_title_holding_a_urls_credentials_is_shown_without_them(report):
    runs = find_runs(report.parents[1])
    plots = report.parent / "plots"
    settings = {"title": "runs of http://carol:Carol5ecretPw@host/x", "metrics": ["val_loss"]}
    page = html.render(runs, settings, plots / "curves.png", plots / "scaling.png")
    assert "Carol5ecretPw" not in page and "runs of http://***@host/x" in page


def test_a_resumed_runs_fit_and_loops_are_said_as_what_each_covers(report):
    """timing.duration_s is the last try's fit, train_seconds every epoch's: "17.4 s, of which training loops
    23.2 s" read as a contradiction."""
    runs = find_runs(report.parents[1])
    timing = runs[0].provenance["timing"]
    timing["duration_s"], timing["train_seconds"] = 17.357, 23.192
    text = render(runs, report)
    assert "of which training loops 23.2 s" not in text
    assert "in the last try; training loops 23.2 s over every epoch, earlier tries' included" in text


def test_recorded_phases_are_shown(report):
    runs = find_runs(report.parents[1])
    for index, run in enumerate(runs):
        run.provenance["timing"]["phases"] = {
            "startup_s": 3.25 + index, "train_loop_s": 1.5, "validation_s": 0.5, "checkpoint_s": 0.25,
            "epoch_ends_s": 0.5, "teardown_s": 0.75, "total_s": 6.75 + index,
        }  # fmt: skip
        schema.validate(run.provenance)
    text = render(runs, report)
    card = re.search(r'id="card-time"><div class="label">(.*?)</div><div class="value">\s*(\S+ \S+)', text)
    assert card.groups() == ("training processes' wall time", "14.5 s")
    assert re.search(r"checkpoints 0.5 s, epoch\s+ends 1.0 s, teardown 1.5 s", text)
    labels, rows = table_rows(text, "time-table")
    phases = ["start-up", "training loop", "validation", "checkpoints", "epoch ends", "teardown", "total"]
    assert labels[3:] == [f"{phase} s, last try" for phase in phases] and len(set(labels)) == len(labels)
    assert [row[3] for row in rows] == ["3.25", "4.25"] and [row[-1] for row in rows] == ["6.75", "7.75"]
    # A record made before epoch_ends_s: its runs' epoch ends are not summed with the others'.
    del runs[0].provenance["timing"]["phases"]["epoch_ends_s"]
    schema.validate(runs[0].provenance)
    assert re.search(r"checkpoints 0.5 s, teardown 1.5 s", render(runs, report))
    del runs[0].provenance["timing"]["phases"]["total_s"]
    with pytest.raises(schema.ProvenanceError, match="total_s"):
        schema.validate(runs[0].provenance)


def test_values_from_a_record_are_escaped(report):
    runs = find_runs(report.parents[1])
    runs[0].provenance["config"]["model"]["name"] = "<script>alert(1)</script>"
    runs[0].provenance["launch"]["ranks"][0]["host"] = '"><img src=x>'
    text = render(runs, report)
    assert "<script" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<img src=x>" not in text


def _throughput_times(run: Run, factor: float) -> Run:
    """The run with every epoch's samples/s multiplied by ``factor`` (its metrics as read, in memory)."""
    rows = [
        {**row, "samples_per_s": row["samples_per_s"] * factor} if row.get("samples_per_s") else row
        for row in run.metrics
    ]
    return dataclasses.replace(run, metrics=rows)


@pytest.mark.parametrize("efficiency", [0.4, 0.95])
def test_a_low_scaling_efficiency_is_explained_on_the_page(report, efficiency):
    """The tiny sweep's two runs, with the 2-process run's throughput set to a chosen efficiency (the
    measured one varies from run to run on two busy cores): the page explains a low one, not a high one."""
    runs = find_runs(report.parents[1])
    settings, curves = {"title": "t", "metrics": ["val_loss"]}, report.parent / "plots/curves.png"
    assert 'id="scaling-why"' not in html.render(runs, settings, curves, None), "no scaling figure, nothing to explain"
    params = varying_params([r.provenance for r in runs])
    measured = {p["run"]: p["efficiency"] for p in figures.scaling_points(runs, params)}["devices-2"]
    shaped = [_throughput_times(r, efficiency / measured) if r.run_id == "devices-2" else r for r in runs]
    page = html.render(shaped, settings, curves, report.parent / "plots/scaling.png")
    reason = figures.why_flat(figures.scaling_points(shaped, params))
    if efficiency < figures.FLAT_EFFICIENCY:
        # The tiny sweep's steps take about a millisecond: the page says what more processes do not divide.
        assert reason is not None and reason["step_ms"] < 20
        why = re.search(r'<p id="scaling-why">(.*?)</p>', page, re.S).group(1)
        assert f"reach only {100 * efficiency:.0f}%" in why and "all-reduce" in why
    else:
        assert reason is None and 'id="scaling-why"' not in page


def test_runs_that_differ_in_world_size_are_said_to_differ_in_global_batch(report):
    """batch_size 32 per process: devices-2 averages 64 samples per step at the same learning rate."""
    text = report.read_text()
    labels, rows = table_rows(text, "runs-table")
    assert {row[0]: row[labels.index("global batch")] for row in rows} == {"devices-1": "32", "devices-2": "64"}
    note = re.search(r'<p class="note" id="global-batch">(.*?)</p>', text, re.S).group(1)
    assert "32, 64" in note and "same learning rate" in note


def test_a_run_restored_as_another_runs_copy_says_so(report):
    """A sweep value whose attempt another run had trained is restored as a copy: its page said "resumed from –
    (fresh start)" beside a launch naming the other run's directory."""
    runs = find_runs(report.parents[1])
    copied, own = runs[0], runs[1]
    copied.provenance["attempt"].update(
        restored=True, restored_from={"run": own.run_id, "attempt": "6dbf370b4e5b", "why": "same_key"}
    )
    schema.validate(copied.provenance)
    said = re.search(r'<dd class="restored">(.*?)</dd>', render(runs, report), re.S).group(1)
    assert said.startswith(f"run <code>{own.run_id}</code>, attempt <code>6dbf370b4e5b</code> (the same config"), said
    assert "nothing trained again" in said and render(runs[1:], report).count('class="restored"') == 0
