"""tools/uv.sh: new_venv on a fresh machine, and hashed_requirements: a locked package whose wheel a find-links
folder holds is installed from that file by its URL (uv hashes no find-links file), its sha256 kept beside uv so
the next set-up does not read the wheel again, and a wheel changed since is hashed afresh."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from bench.venvs import UV
from tests.helpers import REPO

WHEEL = "demo-1.0-py3-none-any.whl"


def hashed(tmp_path: Path, links: Path, lock: Path, python: str = "") -> list[str]:
    # uv.sh's uv, under a tools directory of this test's own (where the digests are kept).
    linked = tmp_path / "tools" / UV.relative_to(UV.parents[2])  # tools/uv-<version>/bin/uv
    linked.parent.mkdir(parents=True, exist_ok=True)
    if not linked.exists():
        linked.symlink_to(UV)
    env = {**os.environ, "SNAKEDDP_TOOLS": str(tmp_path / "tools"), "UV_FIND_LINKS": str(links)}
    option = f"--python {python} " if python else ""
    script = f"source tools/progress.sh; source tools/uv.sh; hashed_requirements {option}{lock}"
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_a_find_links_wheel_is_hashed_once_and_again_when_it_changes(tmp_path):
    links = tmp_path / "wheels"
    links.mkdir()
    wheel = links / WHEEL
    wheel.write_bytes(b"the first build")
    digest = hashlib.sha256(b"the first build").hexdigest()
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"demo==1.0 \\\n    --hash=sha256:{digest}\nother==2.0 \\\n    --hash=sha256:{'0' * 64}\n")
    by_url = f"demo @ file://{wheel} --hash=sha256:{digest}"

    assert hashed(tmp_path, links, lock) == ["other==2.0 \\", f"    --hash=sha256:{'0' * 64}", by_url]
    kept = tmp_path / "tools" / UV.parents[1].name / "find-links.sha256"
    assert kept.read_text().split()[0] == digest
    # Kept: the next call reads the kept digest, not the wheel (a kept digest made up here, which the lock also
    # lists, is the one the wheel's URL is given with).
    made_up = "f" * 64
    kept.write_text(kept.read_text().replace(digest, made_up))
    lock.write_text(lock.read_text().replace("\nother", f" \\\n    --hash=sha256:{made_up}\nother"))
    assert hashed(tmp_path, links, lock)[-1] == f"demo @ file://{wheel} --hash=sha256:{made_up}"
    kept.write_text(kept.read_text().replace(made_up, digest))

    # Rebuilt in place: hashed again, its new digest is not the lock's, so the lock's entry stays as it is.
    wheel.write_bytes(b"the second build")
    os.utime(wheel, ns=(wheel.stat().st_atime_ns, wheel.stat().st_mtime_ns + 1_000_000))
    assert hashed(tmp_path, links, lock) == lock.read_text().splitlines()
    assert len(kept.read_text().splitlines()) == 2


def test_a_find_links_wheel_of_another_python_is_left_to_the_index(tmp_path):
    """This machine's torch wheel is cp311's: for a 3.12 venv the lock's entry stays (uv takes PyPI's wheel of that
    version, by the same hashes) instead of a file URL uv refuses ("no wheels with a matching Python version tag")."""
    links = tmp_path / "wheels"
    links.mkdir()
    major, minor = sys.version_info[:2]
    mine = f"cp{major}{minor}"
    wheel = links / f"demo-1.0-{mine}-{mine}-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"a build of this Python")
    digest = hashlib.sha256(b"a build of this Python").hexdigest()
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"demo==1.0 \\\n    --hash=sha256:{digest} \\\n    --hash=sha256:{'1' * 64}\n")
    assert hashed(tmp_path, links, lock, sys.executable)[-1] == f"demo @ file://{wheel} --hash=sha256:{digest}"
    # Interpreters that answer as other Pythons do (their version is all hashed_requirements asks of them).
    for other in {"3.11", "3.12", "3.13"} - {f"{major}.{minor}"}:
        python = tmp_path / f"python{other}"
        python.write_text(f"#!/bin/sh\nexec python3 -c 'print(\"cp{other.replace('.', '')}\")'\n")
        python.chmod(0o755)
        assert hashed(tmp_path, links, lock, str(python)) == lock.read_text().splitlines()


def test_a_venv_is_made_where_uvs_cache_is_empty_as_on_a_fresh_machine(tmp_path):
    """tools/setup.sh's first step (uv.sh's new_venv) with nothing in uv's cache: the offline try creates the venv's
    folder and fails on the seed packages; the online one made after it was refused ("A virtual environment already
    exists"), so `make run` stopped at its first step on a machine that had never run uv."""
    linked = tmp_path / "tools" / UV.relative_to(UV.parents[2])
    linked.parent.mkdir(parents=True)
    linked.symlink_to(UV)
    env = {**os.environ, "SNAKEDDP_TOOLS": str(tmp_path / "tools"), "UV_CACHE_DIR": str(tmp_path / "empty-cache")}
    venv = tmp_path / "venv"
    script = f"source tools/progress.sh; source tools/uv.sh; new_venv {sys.executable} {venv}"
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    pip = subprocess.run([venv / "bin" / "python", "-m", "pip", "--version"], capture_output=True, text=True)
    assert pip.returncode == 0 and str(venv) in pip.stdout, pip.stdout + pip.stderr
