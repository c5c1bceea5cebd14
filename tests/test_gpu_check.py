"""tools/gpu-check.sh's set-up, the first thing run on a lent GPU machine: a venv over the machine's python3,
which there is itself a venv (/opt/torch/.venv) holding torch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO


def test_the_set_up_over_a_python3_that_is_a_venv_reaches_that_venvs_torch(tmp_path: Path) -> None:
    # This test's interpreter is a venv's, with torch in the venv and not in the base interpreter: as on the
    # GPU image. A plain `venv --system-site-packages` over it reaches the base's packages only.
    assert sys.prefix != sys.base_prefix
    (tmp_path / "tools").mkdir()
    shutil.copy(REPO / "tools" / "gpu-check.sh", tmp_path / "tools")
    (tmp_path / ".gpu-check" / "wheels").mkdir(parents=True)  # nothing carried: the parent venv has it all
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", "tools/gpu-check.sh", "--venv"], cwd=tmp_path, env=env, check=True, timeout=300)

    venv_python = tmp_path / ".gpu-check" / "venv" / "bin" / "python"
    found = subprocess.run(
        [venv_python, "-c", "import sys, torch, snakemake; print(sys.prefix); print(torch.__file__)"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    prefix, torch_file = found.stdout.split()
    assert Path(prefix) == tmp_path / ".gpu-check" / "venv"
    assert Path(torch_file).is_relative_to(sys.prefix)
