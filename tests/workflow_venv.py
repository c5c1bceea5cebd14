"""The venv a test's `snakemake` runs in: the core lock, as `make run` installs it for a user, unless the test
is marked ``dev_venv``.

The dev venv holds the test tools and every optional package the suite exercises, and some of them make a
process slower than it is in a user's venv: Snakemake opens the Snakefile through smart_open, which imports
the transport of each storage SDK installed (azure-storage-blob with aiohttp, boto3, google-cloud-storage),
0.8 s of CPU in every `snakemake` start (a dry run: 1.8 s of CPU instead of 2.6 s), and a Slurm job starts two.
So the workflows the tests drive run in ``.venv-core``: envs/requirements.lock linked from uv's cache with the
dev venv's bytecode (bench.venvs), on the dev venv's interpreter, snakeddp installed from this checkout; built
once per machine and lock, by whichever test process needs it first. Their jobs run in it too (the workflow
puts the interpreter Snakemake runs under first on PATH).

A test whose jobs import an optional package (a tracker, an object store's file system, deltalake, pyspark,
the AzureML SDK) is marked ``pytest.mark.dev_venv``, as a user runs after `tools/add.sh`: its commands run
in the dev venv. A module's mark applies to its module fixtures too; a test's, to what the test itself runs
(tests/conftest.py: ``workflow_venv_of_module``, ``workflow_venv_of_test``). A ``Workflow`` or checkout keeps
the venv current when it was made, so a state a fixture built is run, and verified, in the venv that built it.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.harness import REPO
from bench.venvs import UV, linked_core_venv, uv_environment

CORE = REPO / ".venv-core"
DEV_BIN = Path(sys.executable).parent
#: Beside the venv: what it was built from (the core lock, the packaging, the interpreter).
STAMP = CORE / ".snakeddp-tests-built-from"

_dev = False


@contextmanager
def dev(on: bool) -> Iterator[None]:
    """The dev venv (``on``) or the core one for the commands run inside."""
    global _dev
    before, _dev = _dev, on
    try:
        yield
    finally:
        _dev = before


def bin_dir() -> Path:
    """The venv's bin/ that a test's `snakemake`, `snakeddp warm` and their jobs run from now."""
    return DEV_BIN if _dev else _core_bin()


def snakemake() -> Path:
    return bin_dir() / "snakemake"


def snakeddp() -> Path:
    """The `snakeddp` command of the venv the workflows run in: verify checks a run against the environment
    it trained in, and `snakeddp warm` forks jobs only for its own interpreter."""
    return bin_dir() / "snakeddp"


def built_from() -> str:
    digest = hashlib.sha256(sys._base_executable.encode())
    for name in ("envs/requirements.lock", "pyproject.toml"):
        digest.update((REPO / name).read_bytes())
    return digest.hexdigest()


@functools.cache
def _core_bin() -> Path:
    """``CORE``'s bin/, built first where it is missing or from another lock (one builder at a time: the xdist
    workers wait for the first)."""
    want = built_from()
    with open(REPO / ".venv-core.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not STAMP.is_file() or STAMP.read_text() != want:
            shutil.rmtree(CORE, ignore_errors=True)
            linked_core_venv(CORE, REPO, python=sys._base_executable)
            subprocess.run(
                [UV, "pip", "install", "--quiet", "--python", CORE / "bin" / "python", "--no-deps", "-e", REPO],
                check=True,
                env=uv_environment(),
            )
            STAMP.write_text(want)
    return CORE / "bin"
