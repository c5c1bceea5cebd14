"""The databricks platform's contract: databricks-sdk and each run's request checked before any job (no
credentials needed), the credentials when a run is about to be submitted; a train job submits the run as
a one-time Jobs run and follows it (snakeddp.databricks.submit)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from snakeddp import platforms
from snakeddp.config import ConfigError, site
from snakeddp.databricks import PLATFORM
from snakeddp.platforms.contract import Invocation, Platform, PreflightError, Runs


def check_requests(config: Mapping[str, Any], runs: Runs) -> None:
    """databricks-sdk installed, and each run's request one the Jobs API takes."""
    # Imported here: databricks-sdk is an optional extra, and spec imports it only to build requests.
    from snakeddp.databricks import spec, workspace

    try:
        workspace.require_sdk()
        for run_id, run in runs.items():
            manifest, code = "results/data/manifest.json", "code/unstaged"  # the paths are checked when staged
            # The accelerator as the job will resolve it (auto: the profile's site), so a GPU run's cluster is checked.
            gpu = site.resolved(run["config"]["launch"], PLATFORM, config["site"], run_id=run_id) == "gpu"
            plan = spec.plan_for(run_id, run["config"], config[PLATFORM], manifest, code=code, gpu=gpu, variables={})
            spec.submit_request(plan)
    except ConfigError as error:
        raise PreflightError(str(error)) from None


def check_credentials(section: Mapping[str, Any], to_train: Runs) -> None:
    """databricks-sdk's credential chain resolves, before the first job, when a run will be submitted."""
    if not to_train or not section["submit"]:
        return
    from snakeddp.databricks import workspace

    try:
        workspace.connect(section["profile"])
    except ConfigError as error:
        raise PreflightError(str(error)) from None


class Databricks(Platform):
    row = platforms.row(PLATFORM)

    def check(self, raw: Mapping[str, Any], config: Mapping[str, Any], runs: Runs, *, in_container: bool) -> None:
        check_requests(config, runs)

    def before_jobs(self, invocation: Invocation, to_train: Runs, training: Runs, cores: int) -> None:
        check_credentials(invocation.config[PLATFORM], to_train)

    def submit(self, args: argparse.Namespace) -> int:
        from snakeddp.databricks.submit import main  # the databricks extra, imported only here

        return main(args)


CONTRACT = Databricks()
