"""Drive the real Snakefile through the snakemake CLI in a scratch directory.

``WorkflowDir`` is the harness the benchmarks and the tests share (``tests.helpers.Workflow`` adds
checked runs to it). It lives here because bench imports no test module, while the tests import
bench's harness already (tests/test_bench.py); both find it from the repository's root.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from bench.harness import REPO, child_env, run_checked


class WorkflowDir:
    """A Snakemake working directory outside the repository, and the snakemake command that drives it."""

    def __init__(self, directory: Path, profile: str = "local", checkout: Path = REPO) -> None:
        """``checkout``: the Snakefile and profiles to run, this repository unless another version's."""
        self.directory = directory
        self.snakefile = checkout / "Snakefile"
        self.profile = checkout / "profiles" / profile
        self.configfile = directory / "config.yaml"

    def write_config(self, config: dict) -> Path:
        self.configfile.write_text(yaml.safe_dump(config, sort_keys=False))
        return self.configfile

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
            str(self.profile),
            *args,
        ]


class Workflow(WorkflowDir):
    """A working directory with its config written up front, and a timer around a command."""

    def __init__(self, directory: Path, config: dict[str, Any], profile: str = "local") -> None:
        super().__init__(directory, profile)
        directory.mkdir(parents=True, exist_ok=True)
        self.write_config(config)

    def timed(self, *args: str, python: Path | None = None, env: Mapping[str, str] | None = None) -> tuple[float, str]:
        """Seconds the whole snakemake command took (start-up included), and its output; ``python``:
        the interpreter of another environment to run snakemake with (default: this one)."""
        command = self.command(*args)
        if python is not None:
            command[0] = str(python)
        start = time.perf_counter()
        output = run_checked(command, cwd=self.directory, env=env or child_env())
        return time.perf_counter() - start, output
