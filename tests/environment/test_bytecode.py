"""snakeddp.environment.bytecode, which tools/setup.sh runs after its installs: a new venv's site-packages compiled
whole, after that only the distributions an install (re)made, and snakeddp's sources as compileall -q compiles them.
Real directories laid out as uv installs (a package, its .dist-info with a RECORD), compiled by this interpreter."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

from snakeddp.environment.bytecode import compile_changed
from tests.helpers import REPO


def installed(site: Path, name: str, version: str = "1.0") -> Path:
    """``name`` as uv leaves it in ``site``: its module, and its .dist-info whose RECORD lists it."""
    (site / name).mkdir(parents=True, exist_ok=True)
    (site / name / "__init__.py").write_text(f"NAME = {name!r}\n")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(
        f"{name}/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n../../../bin/{name},,\n"
    )
    return site / name / "__init__.py"


def compiled(module: Path) -> bool:
    return Path(importlib.util.cache_from_source(str(module))).is_file()


def test_a_new_venv_is_compiled_whole_then_only_what_an_install_made_anew(tmp_path):
    site = tmp_path / "site-packages"
    record = tmp_path / ".snakeddp-compiled"
    first = installed(site, "first")
    loose = site / "_virtualenv.py"  # uv's venv writes it; no RECORD lists it
    loose.write_text("x = 1\n")
    assert compile_changed(record, [str(site)]) == 1
    assert compiled(first) and compiled(loose)
    # Bytecode removed by hand is not looked for again: nothing was installed.
    Path(importlib.util.cache_from_source(str(first))).unlink()
    second = installed(site, "second")
    assert compile_changed(record, [str(site)]) == 1
    assert compiled(second) and not compiled(first)
    # Installed again at the same version (a new .dist-info, as uv's --reinstall-package makes it): compiled again.
    shutil.rmtree(site / "first-1.0.dist-info")
    installed(site, "first")
    assert compile_changed(record, [str(site)]) == 1
    assert compiled(first)
    assert compile_changed(record, [str(site)]) == 0
    assert sorted(line.split()[0] for line in record.read_text().splitlines()) == [
        "first-1.0.dist-info",
        "second-1.0.dist-info",
    ]


def test_a_module_that_does_not_compile_is_skipped_in_site_packages_and_fails_the_sources(tmp_path):
    """A wheel may ship a module that never compiles (vendored Python 2): uv skips it quietly, and so does this;
    a syntax error in snakeddp's own sources stops the set-up, as `python -m compileall -q src` did."""
    site = tmp_path / "site-packages"
    good = installed(site, "good")
    (site / "good" / "py2.py").write_text("print 'hello'\n")
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / "ours.py").write_text("def broken(:\n")
    record = tmp_path / ".snakeddp-compiled"
    command = ["--record", record, "--sources", sources, "--site", site]
    done = subprocess.run(
        [sys.executable, "-m", "snakeddp.environment.bytecode", *command],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "ours.py" in done.stdout + done.stderr, done.stdout + done.stderr
    assert "py2.py" not in done.stdout + done.stderr
    assert compiled(good) and not compiled(site / "good" / "py2.py") and not compiled(sources / "ours.py")
    assert record.read_text().startswith("good-1.0.dist-info ")
