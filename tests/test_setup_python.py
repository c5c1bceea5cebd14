"""tools/python.sh, which tools/setup.sh (make run) and tools/lock.sh source first: the interpreter is the first of
python3.11, python3.12, python3.13 and python3 that is one the locks are for, and a machine with none stops in
one line naming the versions and how to get one, before anything is created. Each case runs with a PATH of this
machine's commands, the Pythons on it chosen by the test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.venvs import UV
from tests.checkout import copy_of_this_checkout, hint_lines, typed
from tests.helpers import REPO

# The set-up's own interpreter (CI's, and this machine's python3.11).
PYTHON_311 = "/usr/bin/python3.11"


def path_with(tmp_path: Path, pythons: dict[str, str]) -> str:
    """A directory holding every command of /usr/bin and /bin but their Pythons, and ``pythons`` (name -> binary)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for directory in (Path("/usr/bin"), Path("/bin")):
        for command in directory.iterdir():
            if not command.name.startswith(("python", "pydoc", "pip", "idle", "2to3")):
                link = bin_ / command.name
                if not link.exists() and not link.is_symlink():
                    link.symlink_to(command)
    for name, binary in pythons.items():
        (bin_ / name).symlink_to(binary)
    return str(bin_)


def picked(tmp_path: Path, path: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in {"PYTHON", "VIRTUAL_ENV", "PYTHONPATH"}}
    environ.update(PATH=path, HOME=str(tmp_path / "home"), **env)
    script = 'source tools/progress.sh; source tools/python.sh; echo "PYTHON=$PYTHON"'
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=environ, capture_output=True, text=True, timeout=60)


def test_a_supported_python3_is_taken_when_no_versioned_name_is_on_path(tmp_path):
    """Ubuntu 24.04's and Debian 13's case: only python3 (here the suite's own interpreter) is on PATH."""
    done = picked(tmp_path, path_with(tmp_path, {"python3": sys.executable}))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"PYTHON={tmp_path / 'bin' / 'python3'}"]


def test_a_versioned_name_comes_before_python3(tmp_path):
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    done = picked(tmp_path, path_with(tmp_path, {version: sys.executable, "python3": "/bin/false"}))
    assert done.returncode == 0 and done.stdout.splitlines() == [f"PYTHON={tmp_path / 'bin' / version}"]


def test_no_python_stops_make_runs_set_up_in_one_line_before_anything_is_created(tmp_path):
    path = path_with(tmp_path, {})
    venv = tmp_path / "venv"
    environ = {k: v for k, v in os.environ.items() if k not in {"PYTHON", "VIRTUAL_ENV", "PYTHONPATH"}}
    environ.update(PATH=path, HOME=str(tmp_path / "home"), VENV=str(venv))
    done = subprocess.run(["bash", "tools/setup.sh"], cwd=REPO, env=environ, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "setup: snakeddp needs Python 3.11, 3.12 or 3.13, and this machine has none (no python3 on PATH). HINT: "
        "install one (Debian 12: sudo apt install python3.11 python3.11-venv; Ubuntu 24.04: python3.12 "
        "python3.12-venv), or name one: PYTHON=/path/to/python3.12 make run"
    ]
    assert not venv.exists() and not (tmp_path / "home").exists()


def test_a_python_named_by_hand_that_is_none_of_them_is_refused_in_one_line(tmp_path):
    done = picked(tmp_path, path_with(tmp_path, {"python3": sys.executable}), PYTHON="/opt/none/python3.9")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "setup: PYTHON=/opt/none/python3.9 is no Python that starts, and snakeddp's locks are for Python 3.11, 3.12 "
        "or 3.13. HINT: unset PYTHON, or set it to one of those (e.g. PYTHON=python3.12)"
    ]


PYENV_312 = "/root/.pyenv/versions/3.12.1/bin/python3.12"


@pytest.fixture
def checkout_with_a_312_venv(tmp_path: Path) -> Path:
    """A copy of this checkout whose .venv was made from Python 3.12 (nothing installed yet: the test is the venv's
    Python, not its packages)."""
    root = copy_of_this_checkout(tmp_path / "snakeddp")
    subprocess.run([UV, "venv", "--quiet", "--python", PYENV_312, root / ".venv"], check=True)
    return root


def refused_for_its_python(done: subprocess.CompletedProcess, root: Path) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert hint_lines(done) == [
        f"setup: .venv is Python 3.12, and PYTHON={PYTHON_311} asks for Python 3.11; a venv keeps the Python it was "
        "made from, so nothing was changed. HINT: rm -rf .venv, then run the same command again (it makes .venv from "
        "Python 3.11); or leave PYTHON (SETUP_PYTHON) unset to keep Python 3.12"
    ], done.stdout + done.stderr
    assert "3.12" in (root / ".venv" / "pyvenv.cfg").read_text() and not (root / ".venv" / ".snakeddp-locks").exists()


def test_make_setup_passes_setup_python_and_a_venv_of_another_python_is_said_in_one_line(checkout_with_a_312_venv):
    """make setup (and make run, which runs it) ignored SETUP_PYTHON, and set-up said nothing of a venv made from
    another Python than the one asked for: it went on with the venv's (and make run with its 3.11 venv)."""
    root = checkout_with_a_312_venv
    refused_for_its_python(typed(root, "make", "setup", f"SETUP_PYTHON={PYTHON_311}"), root)
    refused_for_its_python(typed(root, "tools/setup.sh", PYTHON=PYTHON_311), root)


@pytest.mark.e2e
def test_the_hint_for_a_venv_of_another_python_makes_it_from_the_one_asked_for(checkout_with_a_312_venv):
    """The HINT's commands, as typed: the venv is made again from the Python asked for, and set up (a full install)."""
    root = checkout_with_a_312_venv
    command = ("make", "setup", f"SETUP_PYTHON={PYTHON_311}")
    refused_for_its_python(typed(root, *command), root)
    shutil.rmtree(root / ".venv")
    done = typed(root, *command)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "setup: .venv matches envs/requirements.lock" in done.stdout
    version = typed(root, ".venv/bin/python", "-c", "import sys; print(sys.version_info[:2])")
    assert version.stdout.strip() == "(3, 11)"
