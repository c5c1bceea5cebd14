"""Drive the real Snakefile through the snakemake CLI in a scratch directory: the tests' harness."""

from __future__ import annotations

import time
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

    def timed(self, *args: str) -> tuple[float, str]:
        """Seconds the whole snakemake command took (start-up included), and its output."""
        start = time.perf_counter()
        output = run_checked(self.command(*args), cwd=self.directory, env=child_env())
        return time.perf_counter() - start, output
