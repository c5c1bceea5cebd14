"""The spark platform's contract: pyspark, a JDK and a master that answers, checked before any job
(snakeddp.spark.master, without pyspark); a train job runs the Spark application here (its driver)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from snakeddp import platforms
from snakeddp.platforms.contract import Platform, PreflightError, Runs
from snakeddp.spark import PLATFORM, master


class Spark(Platform):
    row = platforms.row(PLATFORM)

    def check(self, raw: Mapping[str, Any], config: Mapping[str, Any], runs: Runs, *, in_container: bool) -> None:
        try:
            master.check(config[PLATFORM], os.environ)
        except master.SparkError as error:
            raise PreflightError(str(error)) from None


CONTRACT = Spark()
