"""A throwaway checkout: the repository's workflow files linked into a temp directory, so tests
type `snakemake --profile profiles/local ...` from its root exactly as the README says; or a copy
of this checkout with a venv of its own (``with_core_venv``), in which tests type `tools/add.sh`,
`make setup` and the rest as a user does (``typed``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.venvs import linked_core_venv
from tests import workflow_venv
from tests.helpers import REPO, subprocess_env

LINKED = ("Snakefile", "rules", "src", "envs", "profiles", "scripts", "report")


def copy_of_this_checkout(root: Path) -> Path:
    """This checkout's tracked and new files (nothing ignored) copied under ``root``, as a fresh clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    return root


def with_core_venv(root: Path) -> Path:
    """``root``/.venv with the core lock installed, as `make run`'s set-up makes it, without its minutes of
    bytecode compiling (bench.venvs)."""
    return linked_core_venv(root / ".venv", root)


def typed(checkout: Path, *command: str, **env: str) -> subprocess.CompletedProcess:
    """A command as a user types it in the checkout's root, with the checkout's venv first on PATH."""
    environ = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    # A config directory of its own: the machine's ~/.config/snakemake profiles would add notes.
    config_home = str(checkout.parent / "config-home")
    environ.update(PATH=f"{checkout / '.venv' / 'bin'}:/usr/bin:/bin", XDG_CONFIG_HOME=config_home, OMP_NUM_THREADS="1")
    environ.update(env)
    return subprocess.run(command, cwd=checkout, env=environ, capture_output=True, text=True, timeout=600)


def hint_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if "HINT:" in line]


class Checkout:
    def __init__(self, root: Path) -> None:
        self.root = root
        for name in LINKED:
            (root / name).symlink_to(REPO / name)
        #: `snakemake` of the venv it runs in, the test's when it is made (tests.workflow_venv).
        self.snakemake_command = workflow_venv.snakemake()
        (root / "config").mkdir()
        shutil.copy(REPO / "config" / "config.yaml", root / "config" / "config.yaml")
        shutil.copy(REPO / "config" / "schema.yaml", root / "config" / "schema.yaml")

    def write_config(self, config: dict) -> None:
        (self.root / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    def snakemake(
        self,
        *args: str,
        cwd: Path | None = None,
        env: dict | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> subprocess.CompletedProcess:
        """`snakemake ARGS` typed in the checkout's root (or ``cwd``), output as one string; ``wrap``: what runs
        it instead (tests.gpu_standin's namespace)."""
        command = [str(self.snakemake_command), *args]
        return subprocess.run(
            wrap(command) if wrap else command,
            cwd=cwd or self.root,
            env=env or subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=900,
            check=False,
        )


def error_lines(output: str) -> list[str]:
    """The lines of Snakemake's output that are snakeddp's own error messages."""
    return [line for line in output.splitlines() if "HINT:" in line]


def local_run_past_first_checkpoint(checkout: Path, log: Path, timeout: float = 300) -> subprocess.Popen:
    """`snakemake --profile profiles/local` typed in ``checkout``, in a session of its own, its output in ``log``;
    returned once the run's first last.ckpt is saved (the run still training)."""
    run_dir = checkout / "results/runs/base"
    with open(log, "w") as run_log:
        typed = subprocess.Popen(
            [workflow_venv.snakemake(), "--profile", "profiles/local"], cwd=checkout, env=subprocess_env(),
            stdout=run_log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while not (run_dir / "checkpoints/last.ckpt").is_file():
        assert typed.poll() is None and time.monotonic() < deadline, "training never saved an epoch"
        time.sleep(0.2)
    return typed
