"""Submit one training run to AzureML, wait for it, and bring its results back.

Called by ``python -m snakeddp.launch --platform azureml`` (the train rule of the azureml
profile) with the run's run.yaml, run directory and data manifest:

1. ``azureml.compute`` and, when submitting, the workspace must be configured;
2. the job spec is written to ``results/runs/<run>/azureml/`` (``job.yml`` for v2,
   ``job.runconfig`` for v1) and validated by the SDK; ``azureml.submit: false`` (or
   ``--dry-run``) stops here;
3. credentials, workspace and compute are checked: nothing is uploaded before all three pass;
4. the job is submitted (code, dataset and a resumed attempt are uploaded, once per content),
   its logs are streamed into the train log, and its run directory is downloaded into
   ``results/runs/<run>/``: provenance.json, metrics.csv and checkpoints land where the local
   profile puts them;
5. a failed or cancelled job fails the train job with AzureML's error text; what it saved
   (its checkpoints) is downloaded too, so rerunning the rule resumes from the newest that came back.

Exit status: 0 when the job completed and its provenance.json arrived; 1 otherwise, including
``azureml.submit: false``, so a run that was never trained never looks finished; 130 when the
submitter was interrupted (the job is cancelled).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from snakeddp.azureml import jobside, staging
from snakeddp.azureml import status as azureml_status
from snakeddp.azureml.plan import DataInput, JobPlan, distribution_for, job_variables
from snakeddp.azureml.settings import AzureMLError, Settings
from snakeddp.azureml.submitted import Outcome, SubmittedJob
from snakeddp.errors import ConfigError, add_hint
from snakeddp.remote.attempt import collect
from snakeddp.remote.job import RemoteJob, Submitted
from snakeddp.run import attempt, tries
from snakeddp.run import variables as names
from snakeddp.run.layout import RunPaths
from snakeddp.util.hashing import sha256_file

# What each SDK flavour imports, and the packages that install it (pyproject.toml's extras azureml, azureml-v1;
# the v1 venv: envs/requirements-azureml-v1.lock).
SDK_MODULES = {"v2": ("azure.ai.ml", "azure.identity"), "v1": ("azureml.core", "azure.identity")}
SDK_PACKAGES = {"v2": "azure-ai-ml azure-identity", "v1": "azureml-core azure-identity"}


def require_sdk(sdk: str) -> None:
    """A clear error when the SDK of ``azureml.sdk`` is not installed (it is an optional extra)."""
    missing = [name for name in SDK_MODULES[sdk] if _missing(name)]
    if missing:
        raise AzureMLError(f"azureml.sdk={sdk} needs {', '.join(missing)} (not installed here). {_sdk_hint(sdk)}")


def _sdk_hint(sdk: str) -> str:
    if sdk == "v1":
        # azureml-core's caps conflict with the dev lock, so the SDK v1 has a venv of its own.
        return (
            "HINT: run `tools/setup.sh --azureml-v1` in the checkout, then Snakemake from the venv it makes "
            "(`source .venv-azureml-v1/bin/activate`), or move the workspace to azureml.sdk: v2 (docs/azureml.md)."
        )
    return f"{add_hint(SDK_PACKAGES[sdk], 'train')}, then rerun."


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ImportError:
        return True


def build_plan(job: AzureMLJob, resume_dir: Path | None) -> JobPlan:
    """The job of ``job``'s run, in its folder (snakeddp.remote.folder), on its environment spec, resuming
    ``resume_dir`` (the attempt snakeddp.remote.job staged: this key's own, or the finished attempt of a
    shorter budget it continues); stages the code snapshot. Read-only for the run directory: what launch's
    ``prepare`` moves there moves after the connection is checked."""
    args, settings, folder, environment, run, launch = (
        job.args, job.settings, job.folder, job.software, job.run, job.launch
    )  # fmt: skip
    compute = settings.require_compute()
    distribution = distribution_for(settings, launch)
    spec_dir = folder.root
    staging.snapshot_code(folder, run, staging.environment_record(environment))
    uri = settings.data.uri
    variables = job_variables(launch, distribution, compute, settings.sdk)
    plan = JobPlan(
        run_id=run.run_id,
        sdk=settings.sdk,
        distribution=distribution,
        nodes=launch.nodes,
        devices=launch.devices,
        # auto is what the profile declares its nodes have (site.accelerator), as each rank resolves it.
        accelerator=names.accelerator(launch, {**os.environ, names.PLATFORM: "azureml"}),
        compute=compute,
        experiment=settings.experiment,
        timeout_s=launch.runtime * 60,
        spec_dir=spec_dir,
        data=DataInput(
            manifest_name=args.data.name,
            mode=settings.data.mode,
            local_dir=None if uri else args.data.parent.resolve(),
            uri=uri,
        ),
        environment=environment,
        datastore=settings.data.datastore,
        shm_size=settings.shm_size,
        resume_dir=resume_dir,
        variables=variables,
        tags={"snakeddp_run": run.run_id, "snakeddp_dataset": run.dataset_id},
    )
    return plan


def write_spec(plan: JobPlan) -> Path:
    """Write and validate the spec with the configured SDK (imported only now: it is an optional extra)."""
    staging.clear_specs(plan.spec_dir)
    if plan.sdk == "v2":
        from snakeddp.azureml import spec_v2

        return spec_v2.write(plan)
    from snakeddp.azureml import spec_v1

    return spec_v1.write(plan)[0]


def submission_variables(settings: Settings, spec_sha256: str) -> dict[str, str]:
    """Added to the job at submission (not in the spec: they name the spec's hash and the workspace)."""
    workspace = settings.workspace
    variables = {
        names.JOB_SPEC_SHA256: spec_sha256,
        jobside.EXPERIMENT: settings.experiment,
        jobside.SUBSCRIPTION: workspace.subscription_id,
        jobside.RESOURCE_GROUP: workspace.resource_group,
        jobside.WORKSPACE: workspace.workspace_name,
    }
    return {name: value for name, value in variables.items() if value}


def manual_submission(plan: JobPlan, spec: Path, settings: Settings, spec_sha256: str) -> str:
    """How a person submits the written spec themselves."""
    if plan.sdk == "v2":
        workspace = settings.workspace
        argv = ["az", "ml", "job", "create", "--file", str(spec)]
        argv += ["--resource-group", workspace.resource_group or "<resource-group>"]
        argv += ["--workspace-name", workspace.workspace_name or "<workspace-name>"]
        argv += ["--set", f"environment_variables.{names.JOB_SPEC_SHA256}={spec_sha256}"]
        return shlex.join(argv)
    from snakeddp.azureml import spec_v1

    uploads = "".join(
        f"\n  upload {local} to datastore {plan.datastore} at {target}" for local, target in spec_v1.uploads(plan)
    )
    return (
        f"RunConfiguration.load({str(spec)!r}) and ScriptRunConfig(source_directory={str(plan.code_dir)!r}, "
        f"run_config=...), submitted with Experiment(ws, {plan.experiment!r}).submit(...), "
        f"after:{uploads or ' nothing'}"
    )


def connect(settings: Settings, plan: JobPlan) -> Any:
    """A session with a checked credential, workspace and compute (before anything is uploaded)."""
    from snakeddp.azureml import credentials

    workspace = settings.require_workspace()
    credential = credentials.default_credential()
    if plan.sdk == "v2":
        from snakeddp.azureml.jobs_v2 import V2Session

        session = V2Session(workspace, credential)
    else:
        from snakeddp.azureml.jobs_v1 import V1Session

        session = V1Session(workspace, credential)
    session.check_compute(plan.compute, plan.nodes, plan.devices, plan.accelerator)
    return session


class AzureMLJob(RemoteJob):
    """One run as an AzureML job (snakeddp.remote.job's sequence): the spec written and validated by the
    configured SDK, submitted with its uploads, streamed, downloaded."""

    name = "azureml"
    error = AzureMLError

    def __init__(self, args: argparse.Namespace, settings: Settings | None = None) -> None:
        super().__init__(args)
        self.settings = settings or Settings.from_environment()
        if self.settings.submit and not args.dry_run:
            self.settings.require_workspace()
        self.software = staging.environment_spec(self.settings, names.torch_build(os.environ))
        self.hang: dict[str, Any] | None = None

    @property
    def sends(self) -> bool:
        return self.settings.submit

    def environment(self) -> dict[str, Any]:
        return staging.environment_record(self.software)

    def prepare(self, identity: attempt.Identity, resume_dir: Path | None) -> Path:
        require_sdk(self.settings.sdk)  # the spec is written and validated with it (the workflow checked it too)
        self.plan = build_plan(self, resume_dir)
        self.spec = write_spec(self.plan)
        self.spec_sha256 = sha256_file(self.spec)
        return self.spec

    def unsent(self, request: Path) -> int:
        manual = manual_submission(self.plan, request, self.settings, self.spec_sha256)
        self.say(f"wrote the job spec of run {self.plan.run_id}: {request} (sha256 {self.spec_sha256})")
        if self.args.dry_run:
            print(f"  submit it with: {manual}", flush=True)
            return 0
        self.say(
            "azureml.submit is false, so nothing was submitted and this run has no results (no provenance.json). "
            f"Submit the spec yourself with:\n  {manual}\nor set azureml.submit: true and rerun the workflow.",
            err=True,
        )
        return 1

    def connect(self) -> Any:
        return connect(self.settings, self.plan)

    def submit(self, session: Any) -> Submitted:
        variables = submission_variables(self.settings, self.spec_sha256)
        job: SubmittedJob = session.submit(self.plan, self.spec, variables)
        fields = {"job": job.name, "url": job.url, "sdk": self.plan.sdk, "spec": self.spec.name, **variables}
        return Submitted("AzureML", "job", job.name, job.url, job, fields)

    def wait(self, session: Any, job: Submitted) -> Outcome:
        # The SDKs' streams take no callback: AzureML's status is asked beside it, into status.json.
        with azureml_status.polled(self.args.run_dir, job.what, lambda: session.status(job.handle)):
            return session.wait(job.handle)

    def cancel(self, session: Any, job: Submitted) -> None:
        session.cancel(job.handle)

    def fetch(self, session: Any, job: Submitted, ended: Outcome) -> tuple[bool, dict[str, Any]]:
        downloaded = session.download(job.handle, self.folder.fresh_download())
        # A rank that found the job hung said which rank, host and node (AZUREML_NODE_NAME) in hung.json.
        self.hang = tries.take_hang(downloaded) if downloaded is not None else None
        collected = downloaded is not None and collect(downloaded, self.args.run_dir)
        self.collected = collected
        return collected, {"status": ended.status, "error": ended.error}

    def judge(self, job: Submitted, ended: Outcome) -> None:
        if not ended.completed:
            kept = " Its checkpoints were downloaded: rerun to resume." if self.collected else ""
            said = self.hang["line"] if self.hang else ended.error or "no error text"
            raise AzureMLError(f"AzureML job {job.id} ended {ended.status}: {said}.{kept}\n  Logs: {job.url}")
        if not RunPaths(self.args.run_dir).provenance.is_file():
            raise AzureMLError(
                f"AzureML job {job.id} completed but no provenance.json came back into {self.args.run_dir}. "
                f"HINT: look for the run directory output in {job.url}."
            )


def main(args: argparse.Namespace) -> int:
    """Entry point of ``snakeddp.launch --platform azureml``; errors become one message and exit status 1."""
    try:
        return AzureMLJob(args).main()
    except ConfigError as error:  # the whole family: AzureML, config, run state
        print(f"snakeddp.azureml: {error}", file=sys.stderr, flush=True)
        return 1
