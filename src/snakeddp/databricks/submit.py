"""Train one run as a one-time Databricks Jobs run: stage, submit, wait, copy back.

Called by ``python -m snakeddp.launch --platform databricks`` (the train rule of the databricks
profile) with the run's run.yaml, run directory and data manifest:

1. the request is built from databricks-sdk's classes, checked, and written to
   ``results/runs/<run>/databricks/submit.json``; ``databricks.submit: false`` (or ``--dry-run``) stops here;
2. the SDK's credential chain must resolve before anything is uploaded;
3. code (under a folder named after its content, uploaded once), data and the run's files (with the
   attempt to resume) are staged under ``databricks.stage``;
4. ``jobs.submit`` sends the request, the SDK's waiter polls ``runs/get`` until the run ends, and
   the remote run directory is copied back (``results``), checked, into ``results/runs/<run>/``;
5. a failed or cancelled run fails the train job in one line; what it saved comes back, so rerunning resumes.

Exit status: 0 when the run succeeded and its provenance.json came back; 1 otherwise (also for
``databricks.submit: false``: a run never trained never looks finished); 130 when interrupted
(the Databricks run is cancelled).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from snakeddp.azureml.staging import stage_resume
from snakeddp.azureml.submitted import record
from snakeddp.cluster import network
from snakeddp.databricks import results, spec, staging, workspace
from snakeddp.errors import DatabricksError, exit_code
from snakeddp.provenance import lineage
from snakeddp.provenance.record import code_info
from snakeddp.run import attempt
from snakeddp.run import variables as names
from snakeddp.run.layout import RUN_FILE, RunPaths
from snakeddp.run.runfile import RunFile
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.redact import MASK

INTERRUPTED_EXIT_CODE = 130
SPEC_DIR = "databricks"
# A new job cluster takes minutes to start before the run's own timeout starts counting.
QUEUE_S = 3600


def job_variables(env: os._Environ | dict[str, str]) -> dict[str, str]:
    """What the job's driver exports before launch: the settings outside the run's identity, no secret."""
    variables = {
        **network.variables({"network": names.network(env)}),
        **{name: env[name] for name in (names.TRACKING, names.SITE, names.SPARK_CONFIG) if name in env},
        names.PLATFORM: "spark",
    }
    code = code_info()
    if code["commit"]:
        variables.update({names.CODE_COMMIT: code["commit"], names.CODE_DIRTY: "1" if code["dirty"] else "0"})
    return variables


def takeover(run_dir: Path, identity: attempt.Identity) -> lineage.Origin | None:
    """The finished attempt this key's attempt takes over, as launch decides it (read-only)."""
    if attempt.restorable(run_dir, identity.key) or attempt.resumable(run_dir, identity.key):
        return None
    return lineage.find(run_dir, identity)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def wait(w: Any, run_id: int, timeout_s: int, spec_dir: Path) -> Any:
    """The run once it ended (the SDK's waiter polls runs/get); a signal cancels it."""
    previous = {signum: signal.signal(signum, _interrupt) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        return w.jobs.wait_get_run_job_terminated_or_skipped(run_id, timeout=timedelta(seconds=timeout_s + QUEUE_S))
    except KeyboardInterrupt:
        w.jobs.cancel_run(run_id)
        record(spec_dir, status="CancelRequested")
        print(f"snakeddp.databricks: interrupted; asked Databricks to cancel run {run_id}", file=sys.stderr, flush=True)
        raise
    except Exception as error:  # the SDK's OperationFailed (INTERNAL_ERROR), a timeout, a lost connection
        raise workspace.api_error(f"waiting for Databricks run {run_id}", error) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def judge(run: Any, run_id: str, download: Path) -> None:
    """One line for a run that did not succeed: the rank's own line when one failed, else Databricks' message."""
    state = run.state
    result = state.result_state.value if state and state.result_state else "without a result"
    said = results.failure_line(download) or (state.state_message if state else "") or "no message"
    page = f" (its page: {run.run_page_url})" if run.run_page_url else ""
    if result == "CANCELED":
        raise DatabricksError(
            f"Databricks run {run.run_id} of run {run_id} was cancelled: {said}{page}. HINT: rerun the same "
            "command to submit it again; it resumes from the last.ckpt that came back."
        )
    raise DatabricksError(
        f"Databricks run {run.run_id} of run {run_id} ended {result}: {said}{page}. HINT: fix what it says (the "
        "page has the driver's log), then rerun the same command: it resumes from the last.ckpt that came back."
    )


def run_job(w: Any, plan: spec.JobPlan, request: dict[str, Any], spec_dir: Path, run_dir: Path) -> int:
    try:
        submitted = w.jobs.submit(**request)
    except Exception as error:
        raise workspace.api_error("submitting the run (jobs/runs/submit)", error) from None
    record(spec_dir, fresh=True, run_id=submitted.run_id, stage=plan.stage)
    print(f"snakeddp.databricks: run {plan.run_id} submitted as Databricks run {submitted.run_id}", flush=True)
    try:
        ended = wait(w, submitted.run_id, plan.timeout_s, spec_dir)
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT_CODE
    succeeded = bool(ended.state and ended.state.result_state and ended.state.result_state.value == "SUCCESS")
    download = results.fetch(w, plan.run_dir, spec_dir / "download")
    collected = results.collect(download, run_dir, succeeded)
    state = ended.state.result_state.value if ended.state and ended.state.result_state else None
    record(spec_dir, status=state, url=ended.run_page_url, collected=collected)
    if not succeeded:
        judge(ended, plan.run_id, download)
    if not RunPaths(run_dir).provenance.is_file():
        raise DatabricksError(
            f"Databricks run {submitted.run_id} succeeded, but no provenance.json came back from {plan.run_dir}. "
            "HINT: the task must run databricks_entry.py as staged; look at the run's driver log."
        )
    print(f"snakeddp.databricks: run {plan.run_id} completed; results in {run_dir}", flush=True)
    return 0


def submit(args: argparse.Namespace) -> int:
    section = names.databricks(os.environ)
    run = RunFile.load(args.config)
    environment = staging.environment_record(section)
    identity = attempt.Identity.of(run.config, args.data, environment)
    origin = takeover(args.run_dir, identity)
    if not args.dry_run and (
        attempt.restorable(args.run_dir, identity.key) or (origin and origin.how != lineage.CONTINUE)
    ):
        lineage.prepare(args.run_dir, identity, run)
        print(f"snakeddp.databricks: run {run.run_id}: {lineage.restore(args.run_dir, identity.key)}", flush=True)
        return 0
    spec_dir = (RunPaths(args.run_dir).folder / SPEC_DIR).resolve()
    continued = origin if origin is not None and origin.how == lineage.CONTINUE else None
    resume_dir = stage_resume(args.run_dir, spec_dir / "resume", identity.key, continued)
    manifest = f"results/data/{args.data.parent.name}/{args.data.name}"
    gpu = names.accelerator(run.config["launch"], {**os.environ, names.PLATFORM: "databricks"}) == "gpu"
    code = staging.snapshot_code(spec_dir / "code")
    variables = job_variables(os.environ)
    plan = spec.plan_for(
        run.run_id, run.config, section, manifest, code=staging.code_path(code), gpu=gpu, variables=variables
    )
    request = spec.submit_request(plan)
    written = spec_dir / "submit.json"
    masked = spec.write_request(request, written)
    run.write(spec_dir / RUN_FILE)
    atomic_write_json(spec_dir / staging.ENVIRONMENT_FILE, environment)
    if args.dry_run or not section["submit"]:
        print(f"snakeddp.databricks: wrote the request of run {run.run_id}: {written}", flush=True)
        if args.dry_run:
            return 0
        values = (
            f"with your values where it shows {MASK} (it keeps none of the config's secrets; written as "
            "{{secrets/<scope>/<key>}} references they stay as written) "
            if masked
            else ""
        )
        raise DatabricksError(
            f"databricks.submit is false, so run {run.run_id} was not submitted and has no results. HINT: send "
            f"{written} yourself {values}(POST /api/2.2/jobs/runs/submit), or set databricks.submit: true and rerun."
        )
    w = workspace.connect(section["profile"])
    staging.stage_code(w, plan, code)
    staging.stage_data(w, plan, args.data)
    start = lineage.prepare(args.run_dir, identity, run)
    if (start.resume is None) != (resume_dir is None):
        raise DatabricksError(f"{args.run_dir} changed while its run was being staged. HINT: rerun to stage it again.")
    if start.origin is not None:
        print(f"snakeddp.databricks: run {plan.run_id}: {start.origin.continuing(plan.run_id, identity.budget)}")
    staging.stage_run(w, plan, spec_dir, resume_dir)
    return run_job(w, plan, request, spec_dir, args.run_dir)


def main(args: argparse.Namespace) -> int:
    """Entry of ``snakeddp.launch --platform databricks``: every error of the family is one line, exit 1."""
    return exit_code("snakeddp.databricks", lambda: submit(args))
