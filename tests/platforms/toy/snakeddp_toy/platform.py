"""The toy platform's contract (snakeddp.contract.RemotePlatform): one node; a train job submits
the run to the toy queue and follows it (snakeddp_toy.job)."""

from __future__ import annotations

import argparse

from snakeddp import platforms
from snakeddp.config.parts import Launch
from snakeddp.contract import Invocation, PreflightError, RemotePlatform, Stateless
from snakeddp_toy import PLATFORM


class Toy(RemotePlatform[Stateless]):
    row = platforms.row(PLATFORM)

    def check(self, invocation: Invocation[Stateless]) -> None:
        """No client to find and no section to read: each run's request is check_run's."""

    def check_run(self, invocation: Invocation[Stateless], run_id: str, launch: Launch) -> None:
        if launch.nodes != 1:
            raise PreflightError(
                f"run {run_id}: launch.nodes={launch.nodes}, but the toy platform has one node. "
                "HINT: set launch.nodes: 1."
            )

    def submit(self, args: argparse.Namespace) -> int:
        from snakeddp.errors import exit_code
        from snakeddp_toy.job import ToyJob

        return exit_code("snakeddp.toy", lambda: ToyJob(args).main())


CONTRACT = Toy()
