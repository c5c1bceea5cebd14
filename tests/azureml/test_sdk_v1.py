"""The SDK v1 tests (marked azureml_v1) in the venv that has azureml-core, .venv-azureml-v1.

azureml-core caps pathspec<1, packaging and python-dateutil, so it stays out of the dev lock and has a lock
and venv of its own (envs/requirements-azureml-v1.lock). This test sets that venv up on demand (tools/setup.sh
--azureml-v1: seconds when it already matches the locks) and runs the marked tests there, so `make test` on a
fresh clone covers the azureml-v1 path too. Only the files that name the marker are collected there: collecting
every file of tests/azureml and tests/compat (importing each, and the SDKs they import) cost 9 s of CPU more.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO, azureml_v1_installed, subprocess_env

V1_VENV = REPO / ".venv-azureml-v1"
MARKER = "azureml_v1"


def marked_files() -> list[str]:
    """The test files of tests/azureml and tests/compat that name the marker (pytest.mark.azureml_v1)."""
    paths = sorted([*(REPO / "tests" / "azureml").rglob("test_*.py"), *(REPO / "tests" / "compat").rglob("test_*.py")])
    return [
        str(path.relative_to(REPO)) for path in paths if path != Path(__file__) and f"mark.{MARKER}" in path.read_text()
    ]


@pytest.mark.skipif(azureml_v1_installed(), reason="azureml-core is installed here: its tests run directly")
def test_the_sdk_v1_tests_pass_in_their_own_venv():
    env = subprocess_env()
    setup = subprocess.run(
        ["tools/setup.sh", "--azureml-v1"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert setup.returncode == 0, f"tools/setup.sh --azureml-v1 failed:\n{setup.stdout[-3000:]}{setup.stderr[-3000:]}"
    # -p no:cacheprovider: the outer run owns .pytest_cache.
    command = [str(V1_VENV / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", MARKER]
    files = marked_files()
    assert files, f"no file of tests/azureml or tests/compat names pytest.mark.{MARKER}"
    done = subprocess.run([*command, *files], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (
        f"the SDK v1 tests failed in {V1_VENV.name}:\n{done.stdout[-6000:]}{done.stderr[-2000:]}"
    )
    assert " passed" in done.stdout and " deselected" in done.stdout, done.stdout[-2000:]
