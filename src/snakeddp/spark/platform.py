"""The spark platform's contract: pyspark, a JDK and a master that answers, checked before any job
(snakeddp.spark.master, without pyspark); launch.accelerator auto is what the cluster's workers offer
(snakeddp.spark.workers), unless the profile declares it; a train job runs its ranks in the workflow's
shared Spark application (snakeddp.spark.sharing), started before the first job (with its session, where
the runs agree on one) and stopped at the end."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snakeddp import platforms
from snakeddp.contract import Invocation, Platform, PreflightError, Runs
from snakeddp.errors import print_line
from snakeddp.run import variables
from snakeddp.spark import PLATFORM, SparkError, master, sharing, workers
from snakeddp.spark.settings import Settings

#: Where the shared application's executors keep their temporary files: in the checkout, which they see.
SCRATCH = Path(".snakemake") / "snakeddp"
#: The rule that ingests a table: one about to run may read it on the executors (snakeddp.spark.ingest).
INGEST_RULE = "data_table"


def settle_site(invocation: Invocation, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The site with auto decided from the cluster's workers where a run needs it and the profile declares
    nothing, said in one line; a job takes its invocation's decision (exported in the site section)."""
    site = dict(invocation.config["site"])
    settled = variables.settled_site(site, invocation.runs, env, deciding=invocation.typed)
    if settled is not None:
        return settled
    try:
        offer = workers.offer(invocation.settings_as(Settings), env)
    except SparkError:
        return site  # no master named: the checks say so, with their HINT
    if offer is None:
        settings = invocation.settings_as(Settings)
        named, source = master.resolve(settings.master, env)
        asked = workers.web_uis(named, settings, env)
        if not asked or not master_answers(named, source):
            # A master that says nothing of its workers (YARN, Kubernetes): auto is refused, naming site. One that
            # does not answer at all: the check says that, with its own HINT.
            return site
        shown = ", ".join(f"{host}:{port}" for host, port in asked)
        raise SparkError(
            f"launch.accelerator is auto, and the Spark master's web UI at {shown} did not answer, so what its "
            "workers offer (GPUs or none) is not known. HINT: export the SPARK_CONF_DIR the cluster's start "
            "printed (its spark-defaults.conf names the UI's port), or set spark.master.ui.port in the config's "
            'spark.conf; or declare what the nodes have ("site={accelerator: cpu}", or gpu).'
        )
    print_line(f"snakeddp: launch.accelerator auto on Spark means {offer.accelerator} ({offer.why}).")
    return {**site, "accelerator": offer.accelerator}


def master_answers(named: str, source: str) -> bool:
    """Whether the master the runs would use answers on its own port (its web UI may be elsewhere)."""
    try:
        master.check_reachable(named, source)
    except SparkError:
        return False
    return True


@dataclass
class SparkState:
    application: sharing.SharedApplication | None = None  # the workflow's one application, once started


class Spark(Platform[SparkState]):
    row = platforms.row(PLATFORM)

    def new_state(self) -> SparkState:
        return SparkState()

    def settle_site(self, invocation: Invocation) -> dict[str, Any]:
        return settle_site(invocation)

    def check(self, invocation: Invocation[SparkState]) -> None:
        try:
            master.check(invocation.settings_as(Settings), os.environ)
        except master.SparkError as error:
            raise PreflightError(str(error)) from None

    def before_jobs(self, invocation: Invocation[SparkState], to_train: Runs, training: Runs, cores: int) -> None:
        if not training:
            return
        if invocation.state.application is None:
            invocation.state.application = sharing.SharedApplication()
        application = invocation.state.application
        if application.process is not None:
            return
        launches = [invocation.launches[run_id] for run_id in training]
        scratch = (SCRATCH / f"spark-{os.getpid()}").resolve()
        # A table's ingestion about to run may read it on the executors, in an application of the ingest job's own
        # (snakeddp.spark.ingest): a session started ahead would hold their cores (every run's ranks), and the
        # ingestion would wait 30 s for an executor that never comes, then read the table alone. The session then
        # starts when the first run asks, after the ingestion it waits for.
        ingesting = INGEST_RULE in invocation.pending
        expect = None if ingesting else sharing.expected(launches, os.environ)
        os.environ[sharing.VARIABLE] = application.start(scratch, sharing.slots(launches), expect=expect)

    def close(self, invocation: Invocation[SparkState]) -> None:
        application = invocation.state.application
        if application is not None:
            application.close()
            os.environ.pop(sharing.VARIABLE, None)


CONTRACT = Spark()
