"""report.html: self-contained, and rendered by headless Chromium with every run and figure."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from matplotlib import image

pytestmark = pytest.mark.e2e
RUNS = ("devices-1", "devices-2")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
)  # fmt: skip


def chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    assert binary, "Debian's chromium is needed to render the report: run tools/system-packages.sh"
    command = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(
        [*command, page.as_uri()], capture_output=True, text=True, timeout=120, check=True, cwd=page.parent
    )


def console_errors(stderr: str) -> list[str]:
    """Page console messages and blocked loads Chromium logs (CSP violations, failed images)."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Refused to" in line]


@pytest.fixture(scope="module")
def report(sweep_workflow) -> Path:
    return sweep_workflow.directory / "results/report/report.html"


def test_page_is_self_contained(report):
    text = report.read_text()
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert "<script" not in text
    for attribute in re.findall(r'(?:src|href)="([^"]*)"', text):
        assert attribute.startswith(("data:image/", "#", "runs.csv", "ro-crate-metadata.json", "files/")), attribute
    assert (report.parent / "ro-crate-metadata.json").is_file()
    assert all((report.parent / f"files/runs/{run}/provenance.json").is_file() for run in RUNS)


def test_embedded_figures_are_the_plot_files(report):
    text = report.read_text()
    for name in ("curves", "scaling"):
        data = re.search(rf'id="figure-{name}" alt="[^"]*" src="data:image/png;base64,([^"]+)"', text).group(1)
        assert base64.b64decode(data) == (report.parent / f"plots/{name}.png").read_bytes()


def test_chromium_renders_every_run_and_figure(report, tmp_path):
    dom = chromium(report, tmp_path / "profile-dom", "--dump-dom")
    assert not console_errors(dom.stderr)
    for run in RUNS:
        assert f'<tr id="row-{run}" data-run="{run}"' in dom.stdout
        assert f'<details id="run-{run}"' in dom.stdout
    assert 'id="figure-curves"' in dom.stdout and 'id="figure-scaling"' in dom.stdout
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
    for name in ("curves", "scaling"):
        height, width = image.imread(report.parent / f"plots/{name}.png").shape[:2]
        assert re.search(rf'id="figure-{name}"[^>]*data-decoded="{width}x{height}"', dom), name
