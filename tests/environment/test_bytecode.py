"""snakeddp.environment.bytecode, which tools/setup.sh runs after its installs: a new venv's site-packages compiled
whole, after that only the distributions an install (re)made, and snakeddp's sources as compileall -q compiles them.
Real directories laid out as uv installs (a package, its .dist-info with a RECORD), compiled by this interpreter."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from snakeddp.environment.bytecode import compile_changed, fits
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


def hashed(site: Path, name: str, source: Path | None = None) -> Path:
    """``name`` as uv installs it from its cache: its module a hard link to the cache's file (``source``; the same
    mtime in every venv), its RECORD with each file's sha256 and a console script's, which differs per venv."""
    module = site / name / "__init__.py"
    module.parent.mkdir(parents=True)
    if source is None:
        module.write_text(f"NAME = {name!r}\n")
    else:
        module.hardlink_to(source)
    digest = base64.urlsafe_b64encode(hashlib.sha256(module.read_bytes()).digest()).rstrip(b"=").decode()
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    script = hashlib.sha256(str(site).encode()).hexdigest()  # its shebang names the venv's python
    (info / "RECORD").write_text(
        f"{name}/__init__.py,sha256={digest},{module.stat().st_size}\n{info.name}/RECORD,,\n"
        f"../../../bin/{name},sha256={script},10\n"
    )
    return module


def pyc(module: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(module)))


def test_a_second_venv_links_the_bytecode_the_first_compiled_and_compiles_what_differs(tmp_path):
    """Another checkout's venv, installed from the same uv cache, takes each distribution's bytecode from the store
    (the same file, not compiled again); a source whose mtime differs (another cache) is compiled, and its stale
    entry replaced; another version of a module is another entry."""
    store = tmp_path / "store"
    first = hashed(tmp_path / "one", "pkg")
    compile_changed(tmp_path / "one.record", [str(tmp_path / "one")], store)
    second = hashed(tmp_path / "two", "pkg", source=first)
    compile_changed(tmp_path / "two.record", [str(tmp_path / "two")], store)
    assert pyc(second).stat().st_ino == pyc(first).stat().st_ino
    assert fits(str(pyc(second)), second.stat())
    (entry,) = (store / sys.implementation.cache_tag).iterdir()

    # The same bytes at another mtime (uv's cache cleaned and filled again): compiled here, and the entry replaced.
    (tmp_path / "copy.py").write_bytes(first.read_bytes())
    os.utime(tmp_path / "copy.py", (1_000_000_000, 1_000_000_000))
    third = hashed(tmp_path / "three", "pkg", source=tmp_path / "copy.py")
    compile_changed(tmp_path / "three.record", [str(tmp_path / "three")], store)
    assert fits(str(pyc(third)), third.stat()) and pyc(third).stat().st_ino != pyc(first).stat().st_ino
    assert [path.name for path in (store / sys.implementation.cache_tag).iterdir()] == [entry.name]
    assert (entry / "pkg" / "__pycache__" / pyc(third).name).stat().st_ino == pyc(third).stat().st_ino

    (tmp_path / "other.py").write_text("NAME = 'other'\n")
    hashed(tmp_path / "four", "pkg", source=tmp_path / "other.py")
    compile_changed(tmp_path / "four.record", [str(tmp_path / "four")], store)
    assert len(list((store / sys.implementation.cache_tag).iterdir())) == 2


def test_a_store_that_cannot_be_written_only_costs_the_compiling(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(0o500)
    try:
        module = hashed(tmp_path / "site", "pkg")
        if os.access(store, os.W_OK):  # root writes anywhere: a file where the store's directory would be
            store.chmod(0o700)
            store.rmdir()
            store.write_text("not a directory\n")
        assert compile_changed(tmp_path / "record", [str(tmp_path / "site")], store) == 1
        assert fits(str(pyc(module)), module.stat())
    finally:
        if store.is_dir():
            store.chmod(0o700)
