"""Train one run as a one-time Databricks Jobs run: stage, submit, wait, copy back.

Called by ``python -m snakeddp.launch --platform databricks`` (the train rule of the databricks
profile) with the run's run.yaml, run directory and data manifest:

1. the request is built from databricks-sdk's classes, checked, and written to
   ``results/runs/<run>/databricks/submit.json``; ``databricks.submit: false`` (or ``--dry-run``) stops here;
2. the SDK's credential chain must resolve before anything is uploaded;
3. code (under a folder named after its content, uploaded once), data and the run's files (with the
   attempt to resume) are staged under ``databricks.stage``;
4. on the cluster the workflow's runs share (SNAKEDDP_DATABRICKS_CLUSTER, snakeddp.databricks.shared_cluster)
   once it is running, else on the run's own job cluster or databricks.existing_cluster_id,
   ``jobs.submit`` sends the request, the SDK's waiter polls ``runs/get`` until the run ends, and
   the remote run directory is copied back (``results``), checked, into ``results/runs/<run>/``;
5. a failed or cancelled run fails the train job in one line; what it saved comes back, so rerunning resumes.

Exit status: 0 when the run succeeded and its provenance.json came back; 1 otherwise (also for
``databricks.submit: false``: a run never trained never looks finished); 130 when interrupted
(the Databricks run is cancelled).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from snakeddp.databricks import PLATFORM, DatabricksError, jobside, results, shared_cluster, spec, staging, workspace
from snakeddp.databricks import status as databricks_status
from snakeddp.databricks.settings import from_environment
from snakeddp.errors import exit_code
from snakeddp.remote import inherited
from snakeddp.remote.job import RemoteJob, Submitted
from snakeddp.run import attempt
from snakeddp.run import variables as names
from snakeddp.run.layout import RUN_FILE, RunPaths
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.redact import MASK

# A new job cluster takes minutes to start before the run's own timeout starts counting.
QUEUE_S = 3600


class DatabricksJob(RemoteJob):
    """One run as a one-time Databricks Jobs run (snakeddp.remote.job's sequence): the request built from the
    SDK's classes and checked, code and data staged under databricks.stage, the run's folder cleared and
    staged, the waiter polled, the run folder copied back and checked."""

    name = "databricks"
    error = DatabricksError

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.settings = from_environment(os.environ)
        # The cluster the workflow created for its runs to share (databricks.share_cluster), if it did.
        self.shared = None if self.settings.existing_cluster_id else os.environ.get(jobside.CLUSTER)

    @property
    def sends(self) -> bool:
        return self.settings.submit

    def environment(self) -> dict[str, Any]:
        return staging.environment_record(self.settings, self.shared)

    def prepare(self, identity: attempt.Identity, resume_dir: Path | None) -> Path:
        run, args = self.run, self.args
        manifest = f"results/data/{args.data.parent.name}/{args.data.name}"
        gpu = names.accelerator(self.launch, {**os.environ, names.PLATFORM: self.name}) == "gpu"
        self.code = self.folder.snapshot()
        # What the job's driver exports before launch (a task on an existing cluster has no variables of its own).
        variables = inherited.variables(PLATFORM)
        settings = replace(self.settings, existing_cluster_id=self.shared) if self.shared else self.settings
        self.plan = spec.plan_for(
            run.run_id, self.launch, settings, manifest, code=staging.code_path(self.code), gpu=gpu,
            variables=variables, resumes=resume_dir is not None,
        )  # fmt: skip
        self.request = spec.submit_request(self.plan)
        written = self.folder.root / "submit.json"
        self.masked = spec.write_request(self.request, written)
        run.write(self.folder.root / RUN_FILE)
        atomic_write_json(self.folder.root / staging.ENVIRONMENT_FILE, self.environment())
        return written

    def unsent(self, request: Path) -> int:
        self.say(f"wrote the request of run {self.run.run_id}: {request}")
        if self.args.dry_run:
            return 0
        values = (
            f", with {MASK} where the config has a secret (written as {{{{secrets/<scope>/<key>}}}} references they "
            "stay as written)"
            if self.masked
            else ""
        )
        # Sent by hand, the request would run nothing: the code, run.yaml and data it names under databricks.stage
        # are uploaded only on the way to sending it.
        raise DatabricksError(
            f"databricks.submit is false, so run {self.run.run_id} was not submitted and has no results; the request "
            f"it would send (POST /api/2.2/jobs/runs/submit) is in {request}{values}, to read: the files it names "
            "under databricks.stage are uploaded only when it is sent. HINT: set databricks.submit: true and rerun."
        )

    def connect(self) -> Any:
        return workspace.connect(self.settings.profile)

    def stage(self, session: Any) -> None:
        staging.stage_code(session, self.plan, self.code)
        staging.stage_data(session, self.plan, self.args.data)

    def stage_run(self, session: Any, resume_dir: Path | None) -> None:
        staging.stage_run(session, self.plan, self.folder.root, resume_dir)

    def submit(self, session: Any) -> Submitted:
        if self.shared:
            shared_cluster.ready(session, self.shared, self.say)
        try:
            submitted = session.jobs.submit(**self.request)
        except Exception as error:
            raise workspace.api_error("submitting the run (jobs/runs/submit)", error) from None
        record = {"run_id": submitted.run_id, "stage": self.plan.stage, "shared_cluster": self.shared}
        return Submitted("Databricks", "run", str(submitted.run_id), handle=submitted.run_id, record=record)

    def wait(self, session: Any, job: Submitted) -> Any:
        timeout = timedelta(seconds=self.plan.timeout_s + QUEUE_S)
        try:
            follow = databricks_status.follow(self.args.run_dir, job.what)  # each poll's state: status.json
            return session.jobs.wait_get_run_job_terminated_or_skipped(job.handle, timeout=timeout, callback=follow)
        except Exception as error:  # the SDK's OperationFailed (INTERNAL_ERROR), a timeout, a lost connection
            raise workspace.api_error(f"waiting for Databricks run {job.id}", error) from None

    def cancel(self, session: Any, job: Submitted) -> None:
        session.jobs.cancel_run(job.handle)

    def fetch(self, session: Any, job: Submitted, ended: Any) -> tuple[bool, dict[str, Any]]:
        self.download = results.fetch(session, self.plan.run_dir, self.folder.download)
        collected = results.collect(self.download, self.args.run_dir, succeeded(ended))
        state = ended.state.result_state.value if ended.state and ended.state.result_state else None
        cluster = ended.cluster_instance.cluster_id if ended.cluster_instance else None
        return collected, {"status": state, "url": ended.run_page_url, "cluster_id": cluster}

    def judge(self, job: Submitted, ended: Any) -> None:
        """One line for a run that did not succeed: the rank's own line when one failed, else Databricks' message."""
        if not succeeded(ended):
            state = ended.state
            result = state.result_state.value if state and state.result_state else "without a result"
            said = results.failure_line(self.download) or (state.state_message if state else "") or "no message"
            page = f" (its page: {ended.run_page_url})" if ended.run_page_url else ""
            if result == "CANCELED":
                raise DatabricksError(
                    f"Databricks run {job.id} of run {self.plan.run_id} was cancelled: {said}{page}. HINT: rerun the "
                    "same command to submit it again; it resumes from the newest checkpoint that came back."
                )
            raise DatabricksError(
                f"Databricks run {job.id} of run {self.plan.run_id} ended {result}: {said}{page}. HINT: fix what it "
                "says (the page has the driver's log), then rerun the same command: it resumes from the newest "
                "checkpoint that came back."
            )
        if not RunPaths(self.args.run_dir).provenance.is_file():
            raise DatabricksError(
                f"Databricks run {job.id} succeeded, but no provenance.json came back from {self.plan.run_dir}. "
                "HINT: the task must run the staged snakeddp/remote/entry.py; look at the run's driver log."
            )


def succeeded(ended: Any) -> bool:
    return bool(ended.state and ended.state.result_state and ended.state.result_state.value == "SUCCESS")


def main(args: argparse.Namespace) -> int:
    """Entry of ``snakeddp.launch --platform databricks``: every error of the family is one line, exit 1."""
    return exit_code("snakeddp.databricks", lambda: DatabricksJob(args).main())
