"""pyproject.toml describes the package as built: its version written once, its license the LICENSE file's,
and its type annotations shipped (py.typed) for the type checkers of code that imports snakeddp."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

import snakeddp
from snakeddp import platforms
from tests.helpers import REPO, SRC

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def test_the_version_is_written_once_in_the_package_and_read_from_there():
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "snakeddp.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", snakeddp.__version__)


def test_the_license_is_the_spdx_name_of_the_license_file():
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n")
    assert not any(c.startswith("License ::") for c in PROJECT["classifiers"]), "the expression replaces them"


def test_the_package_says_it_is_typed():
    assert (SRC / "snakeddp" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["snakeddp"]
    assert "Typing :: Typed" in PROJECT["classifiers"]


@pytest.mark.e2e
def test_the_wheel_carries_the_version_the_license_and_py_typed(tmp_path):
    """Built from a copy of the checkout with this environment's setuptools (no download), as pip builds it."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(SRC, source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("snakeddp-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    # Each platform's settings schema, which the config's schema takes in (snakeddp.config.schema).
    schemas = {row.settings.partition(":")[0].replace(".", "/") + ".yaml" for row in platforms.TABLE if row.settings}
    assert len(schemas) == 3 and schemas <= set(names)
    assert "snakeddp/py.typed" in names and any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert f"\nVersion: {snakeddp.__version__}\n" in metadata and "\nLicense-Expression: MIT\n" in metadata
