"""The spark platform's contract: pyspark, a JDK and a master that answers, checked before any job
(snakeddp.spark.master, without pyspark); a train job runs its ranks in the workflow's shared Spark
application (snakeddp.spark.sharing), started before the first job (with its session, where the runs
agree on one) and stopped at the end."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp import platforms
from snakeddp.config.parts import Launch
from snakeddp.platforms.contract import Invocation, Platform, PreflightError, Runs
from snakeddp.spark import PLATFORM, master, sharing

#: Where the shared application's executors keep their temporary files: in the checkout, which they see.
SCRATCH = Path(".snakemake") / "snakeddp"


class Spark(Platform):
    row = platforms.row(PLATFORM)

    def check(self, raw: Mapping[str, Any], config: Mapping[str, Any], runs: Runs, *, in_container: bool) -> None:
        try:
            master.check(config[PLATFORM], os.environ)
        except master.SparkError as error:
            raise PreflightError(str(error)) from None

    def before_jobs(self, invocation: Invocation, to_train: Runs, training: Runs, cores: int) -> None:
        if not training:
            return
        application = invocation.remember("spark.application", sharing.SharedApplication)
        if application.process is not None:
            return
        launches = [Launch.of(run["config"]["launch"]) for run in training.values()]
        scratch = (SCRATCH / f"spark-{os.getpid()}").resolve()
        expect = sharing.expected(launches, os.environ)
        os.environ[sharing.VARIABLE] = application.start(scratch, sharing.slots(launches), expect=expect)

    def close(self, invocation: Invocation) -> None:
        application = invocation.memo.get("spark.application")
        if application is not None:
            application.close()
            os.environ.pop(sharing.VARIABLE, None)


CONTRACT = Spark()
