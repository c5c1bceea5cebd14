"""A throwaway checkout: the repository's workflow files linked into a temp directory, so tests
type `snakemake --profile profiles/local ...` from its root exactly as the README says."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import REPO, subprocess_env

LINKED = ("Snakefile", "rules", "src", "envs", "profiles", "scripts", "report")
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


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


class Checkout:
    def __init__(self, root: Path) -> None:
        self.root = root
        for name in LINKED:
            (root / name).symlink_to(REPO / name)
        (root / "config").mkdir()
        shutil.copy(REPO / "config" / "config.yaml", root / "config" / "config.yaml")
        shutil.copy(REPO / "config" / "schema.yaml", root / "config" / "schema.yaml")

    def write_config(self, config: dict) -> None:
        (self.root / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    def snakemake(self, *args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
        """`snakemake ARGS` typed in the checkout's root (or ``cwd``), output as one string."""
        return subprocess.run(
            [SNAKEMAKE, *args],
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
