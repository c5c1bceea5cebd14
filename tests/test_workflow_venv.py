"""The venv the tests' workflows run in (tests/workflow_venv.py): a user's, the core lock's, unless a test is
marked dev_venv; a workflow keeps the venv it was made in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from snakeddp.environment.lock import read_lock
from tests import workflow_venv
from tests.checkout import Checkout
from tests.helpers import REPO, SRC, Workflow, copy_of

# What the core venv must hold and what only the dev venv has (smart_open imports the storage SDKs where they are).
PROBE = """
import importlib.metadata, importlib.util, snakeddp
def found(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package is not there
        return False
print(snakeddp.__file__)
print(importlib.metadata.version("lightning"))
print(*[n for n in ("azure.storage.blob", "boto3", "google.cloud.storage", "pytest") if found(n)])
"""


def probe(python: Path) -> list[str]:
    done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, check=True, cwd="/")
    return done.stdout.splitlines()


def test_a_workflow_runs_in_the_core_lock_with_this_checkouts_package_and_no_dev_package(tmp_path):
    flow = Workflow(tmp_path / "flow")
    python = Path(flow.command()[0])
    assert python.parent == workflow_venv.CORE / "bin"
    assert Path(Checkout(tmp_path).snakemake_command).parent == python.parent
    package, lightning, *dev_only = probe(python)
    assert Path(package) == SRC / "snakeddp" / "__init__.py"
    assert lightning == read_lock(REPO / "envs" / "requirements.lock").version("lightning")
    assert dev_only == [""], "the core venv holds no storage SDK and no test tool"
    assert probe(Path(sys.executable))[2].split() == ["azure.storage.blob", "boto3", "google.cloud.storage", "pytest"]


@pytest.mark.dev_venv
def test_a_test_marked_dev_venv_runs_its_workflows_in_the_dev_venv_and_a_copy_keeps_the_venv(tmp_path):
    flow = Workflow(tmp_path / "flow")
    assert flow.command()[0] == sys.executable
    flow.directory.mkdir()
    with workflow_venv.dev(False):
        assert copy_of(flow, tmp_path / "copy").command()[0] == sys.executable, (
            "the copy runs where its state was built"
        )
        assert Workflow(tmp_path / "other").command()[0] == str(workflow_venv.CORE / "bin" / "python")
