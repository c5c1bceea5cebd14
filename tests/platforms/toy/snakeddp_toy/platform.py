"""The toy platform's contract (snakeddp.platforms.contract.Platform): one node, named by the toy scheduler."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from snakeddp import platforms
from snakeddp.config.parts import Launch
from snakeddp.platforms.contract import Invocation, Platform, PreflightError, Stateless
from snakeddp_toy import JOB, NODE, PLATFORM


class Toy(Platform[Stateless]):
    row = platforms.row(PLATFORM)

    def check(self, invocation: Invocation[Stateless]) -> None:
        """No client to find and no section to read: each run's request is check_run's."""

    def check_run(self, invocation: Invocation[Stateless], run_id: str, launch: Launch) -> None:
        if launch.nodes != 1:
            raise PreflightError(
                f"run {run_id}: launch.nodes={launch.nodes}, but the toy platform has one node. "
                "HINT: set launch.nodes: 1."
            )

    def exports(self, config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
        return {NODE: "toy-node-0", JOB: f"toy-{os.getpid()}"}


CONTRACT = Toy()
