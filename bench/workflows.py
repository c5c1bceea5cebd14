"""Drive the real Snakefile through the snakemake CLI in a scratch directory (as tests/conftest.py does)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench.harness import REPO, child_env, run_checked


class Workflow:
    """A scratch working directory with its own config, run with the local profile."""

    def __init__(self, directory: Path, config: dict[str, Any], snakefile: Path = REPO / "Snakefile") -> None:
        self.directory = directory
        self.snakefile = snakefile
        directory.mkdir(parents=True, exist_ok=True)
        self.configfile = directory / "config.yaml"
        self.configfile.write_text(yaml.safe_dump(config, sort_keys=False))

    def command(self, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(self.snakefile),
            "--directory",
            str(self.directory),
            "--configfile",
            str(self.configfile),
            "--profile",
            str(REPO / "profiles" / "local"),
            *args,
        ]

    def timed(self, *args: str) -> tuple[float, str]:
        """Seconds the whole snakemake command took (start-up included), and its output."""
        start = time.perf_counter()
        output = run_checked(self.command(*args), cwd=self.directory, env=child_env())
        return time.perf_counter() - start, output
