"""tools/uv.sh's hashed_requirements: a locked package whose wheel a find-links folder holds is installed from
that file by its URL (uv hashes no find-links file), its sha256 kept beside uv so the next set-up does not read
the wheel again, and a wheel changed since is hashed afresh."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from bench.venvs import UV
from tests.helpers import REPO

WHEEL = "demo-1.0-py3-none-any.whl"


def hashed(tmp_path: Path, links: Path, lock: Path) -> list[str]:
    # uv.sh's uv, under a tools directory of this test's own (where the digests are kept).
    linked = tmp_path / "tools" / UV.relative_to(UV.parents[2])  # tools/uv-<version>/bin/uv
    linked.parent.mkdir(parents=True, exist_ok=True)
    if not linked.exists():
        linked.symlink_to(UV)
    env = {**os.environ, "SNAKEDDP_TOOLS": str(tmp_path / "tools"), "UV_FIND_LINKS": str(links)}
    script = f"source tools/progress.sh; source tools/uv.sh; hashed_requirements {lock}"
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
