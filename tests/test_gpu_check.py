"""tools/gpu-check.sh's set-up, the first thing run on a lent GPU machine: a venv over the machine's python3,
which there is itself a venv (/opt/torch/.venv) holding torch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.helpers import REPO


def test_the_set_up_over_a_python3_that_is_a_venv_reaches_that_venvs_packages(tmp_path: Path) -> None:
    # The image's venv: a package in its own site-packages and not in the base interpreter's, as torch is there.
    # (A venv of its own, not this suite's: where the base interpreter's site-packages run a .pth at start-up,
    # as a sandbox's certificate hook does, it must not reach the suite's installed files.)
    image_bin, purelib = image_with(tmp_path, {})
    (purelib / "only_in_the_image.py").write_text("WHERE = __file__\n")
    checkout = checkout_with(tmp_path, "{}.{}".format(*sys.version_info[:2]))  # nothing carried: the image has it all
    env = {**os.environ, "PATH": f"{image_bin}{os.pathsep}{os.environ['PATH']}"}
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


def image_with(tmp_path: Path, packages: dict[str, str]) -> tuple[Path, Path]:
    """The image's venv (a venv of its own, see above) holding each of ``packages`` (name: version) as an
    installed distribution whose module says where it is; its bin folder and its purelib."""
    image = tmp_path / "image-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", image], check=True, timeout=120)
    purelib = Path(
        subprocess.run(
            [image / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()
    )  # fmt: skip
    for name, version in packages.items():
        (purelib / f"{name}.py").write_text(f"WHERE, VERSION = __file__, {version!r}\n")
        info = purelib / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text("")
    return image / "bin", purelib


def wheel(folder: Path, name: str, version: str) -> Path:
    """A pure wheel of one module, as --prepare downloads them."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}.py", f"WHERE, VERSION = __file__, {version!r}\n")
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


def checkout_with(tmp_path: Path, python: str) -> Path:
    """A checkout holding tools/gpu-check.sh and carried wheels prepared for ``python`` (X.Y)."""
    checkout = tmp_path / "checkout"
    (checkout / "tools").mkdir(parents=True)
    shutil.copy(REPO / "tools" / "gpu-check.sh", checkout / "tools")
    (checkout / ".gpu-check" / "wheels").mkdir(parents=True)
    (checkout / ".gpu-check" / "wheels" / "PYTHON").write_text(f"{python}\n")  # as --prepare --python writes it
    return checkout


def test_a_package_the_image_has_at_another_version_is_the_carried_one(tmp_path: Path) -> None:
    # Lightning as it stood: the image's 2.5.0 where snakeddp runs 2.6.x only; a package at the lock's version
    # is the image's own.
    image_bin, purelib = image_with(tmp_path, {"lightning_like": "2.5.0", "same_in_both": "1.0"})
    checkout = checkout_with(tmp_path, "{}.{}".format(*sys.version_info[:2]))
    wheel(checkout / ".gpu-check" / "wheels", "lightning_like", "2.6.6")
    wheel(checkout / ".gpu-check" / "wheels", "same_in_both", "1.0")
    env = {**os.environ, "PATH": f"{image_bin}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", "tools/gpu-check.sh", "--venv"], cwd=checkout, env=env, check=True, timeout=300)

    venv_python = checkout / ".gpu-check" / "venv" / "bin" / "python"
    found = subprocess.run(
        [venv_python, "-c", "import lightning_like as a, same_in_both as b; print(a.VERSION, a.WHERE, b.WHERE)"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    version, carried, image_own = found.stdout.split()
    assert version == "2.6.6"
    assert Path(carried).is_relative_to(checkout / ".gpu-check" / "venv")
    assert Path(image_own).parent == purelib


def test_wheels_prepared_for_another_python_stop_the_check_first_in_one_line(tmp_path: Path) -> None:
    image_bin, _ = image_with(tmp_path, {})
    here = "{}.{}".format(*sys.version_info[:2])
    checkout = checkout_with(tmp_path, "3.99")
    wheel(checkout / ".gpu-check" / "wheels", "carried", "1.0")
    env = {**os.environ, "PATH": f"{image_bin}{os.pathsep}{os.environ['PATH']}"}
    refused = subprocess.run(
        ["bash", "tools/gpu-check.sh", "--venv"], cwd=checkout, env=env, capture_output=True, text=True, timeout=300
    )
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"gpu-check: the carried wheels are for Python 3.99, and this machine's python3 is {here}: nothing was run. "
        f"HINT: where PyPI answers, run tools/gpu-check.sh --prepare --python {here}, and carry .gpu-check again."
    ]
    assert not (checkout / ".gpu-check" / "venv").exists()
    # Prepared for this Python (the marker --prepare --python writes beside its wheels), the set-up goes on.
    (checkout / ".gpu-check" / "wheels" / "PYTHON").write_text(f"{here}\n")
    subprocess.run(["bash", "tools/gpu-check.sh", "--venv"], cwd=checkout, env=env, check=True, timeout=300)
    assert (checkout / ".gpu-check" / "venv" / "bin" / "python").exists()


def test_its_pytest_step_runs_every_file_with_gpu_tests() -> None:
    """A gpu-marked test outside the files the check names would never run on a lent GPU (the only place it can)."""
    marked = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "tests").rglob("test_*.py")
        if re.search(r"pytest\.mark\.gpu\b", path.read_text())
    }
    script = (REPO / "tools" / "gpu-check.sh").read_text()
    named = {name for name in script.split() if name.startswith("tests/")}
    assert marked, "no gpu-marked test found"
    left_out = {name for name in marked if not any(name == n or name.startswith(n + "/") for n in named)}
    assert not left_out, left_out
