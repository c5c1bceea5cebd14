"""tools/gpu-check.sh's set-up, the first thing run on a lent GPU machine: a venv over the machine's python3,
which there is itself a venv (/opt/torch/.venv) holding torch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO


def test_the_set_up_over_a_python3_that_is_a_venv_reaches_that_venvs_packages(tmp_path: Path) -> None:
    # The image's venv: a package in its own site-packages and not in the base interpreter's, as torch is there.
    # (A venv of its own, not this suite's: where the base interpreter's site-packages run a .pth at start-up,
    # as a sandbox's certificate hook does, it must not reach the suite's installed files.)
    image = tmp_path / "image-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", image], check=True, timeout=120)
    purelib = subprocess.run(
        [image / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "only_in_the_image.py").write_text("WHERE = __file__\n")
    checkout = tmp_path / "checkout"
    (checkout / "tools").mkdir(parents=True)
    shutil.copy(REPO / "tools" / "gpu-check.sh", checkout / "tools")
    (checkout / ".gpu-check" / "wheels").mkdir(parents=True)  # nothing carried: the image has it all
    env = {**os.environ, "PATH": f"{image / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", "tools/gpu-check.sh", "--venv"], cwd=checkout, env=env, check=True, timeout=300)

    venv_python = checkout / ".gpu-check" / "venv" / "bin" / "python"
    found = subprocess.run(
        [venv_python, "-c", "import sys, only_in_the_image; print(sys.prefix); print(only_in_the_image.WHERE)"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    prefix, where = found.stdout.split()
    assert Path(prefix) == checkout / ".gpu-check" / "venv"
    assert Path(where).parent == Path(purelib)
