"""A venv of the core lock as `make run`'s set-up installs it, in seconds instead of its minute of bytecode
compiling: uv links the locked packages from its cache, and the bytecode of the venv running this (the dev venv,
which holds every core package at the same version, compiled by its own set-up) is linked beside them. The same
files, so they are valid; Python and uv replace a .pyc rather than write into it, so the running venv is never
touched. bench's tutorial workload runs in one, and the tests' checkouts that type `tools/add.sh` and `make setup`
(tests.checkout.with_core_venv)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

UV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "snakeddp" / "uv-0.13.8" / "bin" / "uv"
SITE = "lib/python3.11/site-packages"


def uv_environment() -> dict[str, str]:
    """This environment with pip's find-links given to uv, which does not read pip's config (a machine's own
    wheels, this one's CPU torch, stay usable), as tools/uv.sh does."""
    return {**os.environ, "UV_FIND_LINKS": os.environ.get("PIP_FIND_LINKS", "")}


def linked_core_venv(venv: Path, checkout: Path, python: str | None = None, *, set_up: bool = False) -> Path:
    """``venv`` with ``checkout``'s core lock installed (every file's hash checked, the lock recorded as what the
    venv was verified against, as tools/setup.sh records it), its bytecode linked from this interpreter's venv;
    ``python``: the interpreter it is made from (uv's choice, as tools/setup.sh's python3, when None). ``set_up``:
    also as tools/setup.sh leaves it (``set_up_as_setup_sh``)."""
    uv = uv_environment()
    interpreter = ["--python", python] if python else []
    subprocess.run([UV, "venv", "--quiet", "--seed", *interpreter, venv], check=True, env=uv)
    # As tools/setup.sh installs it: the find-links torch by its file's URL, its hash still checked.
    hashed = subprocess.run(
        ["bash", "-c", "source tools/progress.sh; source tools/uv.sh; hashed_requirements envs/requirements.lock"],
        cwd=checkout,
        env=uv,
        check=True,
        capture_output=True,
        text=True,
    )
    requirements = venv / ".snakeddp-requirements"
    requirements.write_text(hashed.stdout)
    sync = [UV, "pip", "sync", "--quiet", "--require-hashes", "--python", venv / "bin/python", requirements]
    # Offline first, as tools/uv.sh's cached_first: online, uv asks the index about every locked package (0.5 s).
    if subprocess.run([*sync, "--offline"], env=uv, capture_output=True).returncode != 0:
        subprocess.run(sync, check=True, env=uv)
    shutil.copy(checkout / "envs/requirements.lock", venv / ".snakeddp-verified")
    ours = Path(sys.prefix) / SITE
    for cache in ours.rglob("__pycache__"):
        target = venv / SITE / cache.relative_to(ours)
        if target.parent.is_dir() and not target.exists():
            target.mkdir()
            for pyc in cache.iterdir():
                os.link(pyc, target / pyc.name)
    if set_up:
        set_up_as_setup_sh(venv, checkout)
    return venv


def setup_stamp(venv: Path, checkout: Path) -> str:
    """What tools/setup.sh writes to ``venv``/.snakeddp-locks after setting it up from the core lock: the
    fingerprint of the lock, every torch build's lock and pyproject.toml, and the CUDA build where torch is not
    PyPI's (its ``fingerprint`` and ``stamp_of``)."""
    locks = [checkout / "envs/requirements.lock", *sorted((checkout / "envs").glob("requirements-torch-*.lock"))]
    fingerprint = hashlib.sha256(b"".join(p.read_bytes() for p in [*locks, checkout / "pyproject.toml"])).hexdigest()
    build = _snakeddp_says(venv, checkout, "snakeddp.environment.venv_build", "--lock", "envs/requirements.lock")
    cuda, _, index = build[:3]
    return fingerprint if index == "-" else f"{fingerprint} cuda {cuda}"


def _snakeddp_says(venv: Path, checkout: Path, module: str, *args: str) -> list[str]:
    """The words ``python -m MODULE ARGS`` of ``checkout``'s snakeddp prints, run by ``venv``'s interpreter."""
    return subprocess.run(
        [venv / "bin/python", "-m", module, *args],
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout / "src")},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()


def set_up_as_setup_sh(venv: Path, checkout: Path) -> None:
    """A linked venv as tools/setup.sh leaves it: snakeddp installed from ``checkout`` (editable) and the stamp that
    says which locks it was set up from, so that tools/setup.sh finds it matching them (after comparing the venv
    with the locks) and returns at once, where it would install the same again and import what the stages import
    (10 s of CPU). A stamp written here that no longer matches tools/setup.sh's is no harm: it sets the venv up."""
    python = venv / "bin/python"
    subprocess.run([UV, "pip", "install", "--quiet", "--python", python, "--no-deps", "-e", checkout],
                   check=True, env=uv_environment())  # fmt: skip
    # What no lock names (the seed's wheel), removed as tools/setup.sh removes it.
    extra = _snakeddp_says(
        venv, checkout, "snakeddp.environment.lock", "extra", "envs/requirements.lock", "envs/requirements-dev.lock"
    )
    if extra:
        uninstall = [UV, "pip", "uninstall", "--quiet", "--python", python, *extra]
        subprocess.run(uninstall, check=True, env=uv_environment())
    (venv / ".snakeddp-locks").write_text(setup_stamp(venv, checkout) + "\n")
