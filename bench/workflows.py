"""Drive the real Snakefile through the snakemake CLI in a scratch directory: the tests' harness."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.harness import child_env, run_checked
from tests import helpers


class Workflow(helpers.Workflow):
    """tests.helpers.Workflow with its config written up front and a timer around a command."""

    def __init__(self, directory: Path, config: dict[str, Any]) -> None:
        super().__init__(directory)
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
