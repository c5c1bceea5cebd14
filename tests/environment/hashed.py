"""envs/ with every torch build's lock hashed, for the tests of what installs a build (the AzureML image
environment, --sdm conda): the committed lock where PyTorch's index answered when tools/lock.sh wrote it, else one
written here as tools/lock.sh writes it. Where the index did not answer (12.6, 13.2 and cpu on this machine) the
committed lock holds no torch and every installer refuses the build, which left those tests only their refusal."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from snakeddp.environment.builds import BUILDS
from snakeddp.environment.lock import read_lock
from tests.helpers import REPO

# A runtime wheel the CUDA 12.6 build adds beside PyPI's packages, as its committed lock adds one where it is locked.
RUNTIME_12_6 = "nvidia-cuda-runtime-cu12==12.6.77"


def hashed_envs(directory: Path) -> Path:
    """A copy of envs/ in ``directory`` whose every torch build's lock names its torch with a sha256 (made up for
    the test where the committed lock has none: a spec or a dry run names the files, nothing downloads them)."""
    shutil.copytree(REPO / "envs", directory, dirs_exist_ok=True)
    for cuda, build in BUILDS.items():
        path = directory / f"requirements-torch-{cuda}.lock"
        if "torch" in read_lock(path).pins:
            continue
        digest = hashlib.sha256(f"torch {build.label}".encode()).hexdigest()
        runtime = hashlib.sha256(f"runtime {build.label}".encode()).hexdigest()
        path.write_text(
            f"# torch's build from {build.index_url}, written by tests/environment/hashed.py.\n"
            f"torch==2.13.0+{build.label} \\\n    --hash=sha256:{digest}\n    # from {build.index_url}\n"
            + (f"{RUNTIME_12_6} \\\n    --hash=sha256:{runtime}\n" if cuda == "12.6" else "")
        )
    return directory


def unhashed(directory: Path, cuda: str) -> None:
    """``cuda``'s lock in ``directory`` as tools/lock.sh leaves it where PyTorch's index does not answer."""
    index = BUILDS[cuda].index_url
    (directory / f"requirements-torch-{cuda}.lock").write_text(
        f"# Not locked: {index} did not answer when tools/lock.sh ran ([Errno -2] Name or service not known). "
        f"Every installer refuses this build until tools/lock.sh runs where {index} answers.\n"
    )
