"""SDK v1 (azureml-core) online steps: check the workspace and compute, upload, submit, stream, download."""

from __future__ import annotations

from pathlib import Path

from azure.core.credentials import TokenCredential
from azureml.core import ComputeTarget, Datastore, Environment, Experiment, Run
from azureml.core import Workspace as AzureWorkspace
from azureml.core.authentication import TokenAuthentication
from azureml.core.compute import AmlCompute
from azureml.exceptions import ComputeTargetException, ProjectSystemException, WorkspaceException

from snakeddp.azureml import spec_v1, vmsizes
from snakeddp.azureml.credentials import token_for_resource
from snakeddp.azureml.plan import JobPlan
from snakeddp.azureml.settings import AzureMLError, Workspace
from snakeddp.azureml.submitted import Outcome, SubmittedJob


class V1Session:
    """One workspace, reached with azureml-core."""

    def __init__(self, workspace: Workspace, credential: TokenCredential) -> None:
        self.workspace = workspace
        self.runs: dict[str, tuple[Run, str]] = {}  # run id -> (run, datastore of its outputs)
        try:
            self.ws = AzureWorkspace(
                subscription_id=workspace.subscription_id,
                resource_group=workspace.resource_group,
                workspace_name=workspace.workspace_name,
                auth=TokenAuthentication(token_for_resource(credential)),
            )
        except (WorkspaceException, ProjectSystemException) as exc:
            raise AzureMLError(
                f"cannot open workspace {workspace.workspace_name!r} in resource group {workspace.resource_group!r}: "
                f"{exc.message}. HINT: check azureml.workspace and the signed-in identity's role on it. "
                "Nothing was uploaded."
            ) from None

    def check_compute(self, compute: str, nodes: int, devices: int = 1, accelerator: str = "cpu") -> None:
        try:
            target = ComputeTarget(workspace=self.ws, name=compute)
        except ComputeTargetException:
            known = sorted(self.ws.compute_targets)
            raise AzureMLError(
                f"compute {compute!r} not found in workspace {self.workspace.workspace_name!r} "
                f"(it has: {', '.join(known) or 'none'}). HINT: create a compute cluster or set azureml.compute. "
                "Nothing was uploaded."
            ) from None
        scale = getattr(target, "scale_settings", None)
        maximum = getattr(scale, "maximum_node_count", None)
        if maximum is not None and maximum < nodes:
            raise AzureMLError(
                f"compute {compute!r} scales to {maximum} node(s) but launch.nodes={nodes}. HINT: raise its maximum "
                "node count or lower launch.nodes. Nothing was uploaded."
            )
        size = getattr(target, "vm_size", None)
        if size:
            vmsizes.check(compute, size, AmlCompute.supported_vmsizes(self.ws), devices, accelerator)

    def submit(self, plan: JobPlan, spec: Path, variables: dict[str, str]) -> SubmittedJob:
        """Upload the dataset and resumed attempt to the datastore, then submit the ScriptRunConfig."""
        datastore = Datastore.get(self.ws, plan.datastore)
        for local, target in spec_v1.uploads(plan):
            datastore.upload(src_dir=str(local), target_path=target, overwrite=False, show_progress=False)
        src = spec_v1.build(plan)
        if plan.environment.source == "registered":
            name, version = src.run_config.environment.name, src.run_config.environment.version
            src.run_config.environment = Environment.get(self.ws, name=name, version=version)
        src.run_config.environment_variables.update(variables)
        run = Experiment(self.ws, plan.experiment).submit(src)
        self.runs[run.id] = (run, plan.datastore)
        return SubmittedJob(name=run.id, url=run.get_portal_url())

    def wait(self, job: SubmittedJob) -> Outcome:
        """Stream the run's logs to stdout until it ends."""
        run, _ = self.runs[job.name]
        details = run.wait_for_completion(show_output=True, raise_on_error=False)
        error = details.get("error", {}).get("error", {}).get("message")
        return Outcome(status=details.get("status", run.get_status()), error=error)

    def status(self, job: SubmittedJob) -> str:
        """AzureML's status of the run now ("Queued", "Running", ...)."""
        run, _ = self.runs[job.name]
        return run.get_status()

    def download(self, job: SubmittedJob, destination: Path) -> Path | None:
        """The run directory output (written to the datastore) into ``destination``; its path."""
        _, datastore = self.runs[job.name]
        prefix = spec_v1.output_path(job.name)
        count = Datastore.get(self.ws, datastore).download(
            target_path=str(destination), prefix=prefix, overwrite=True, show_progress=False
        )
        return destination / prefix if count else None

    def cancel(self, job: SubmittedJob) -> None:
        run, _ = self.runs[job.name]
        run.cancel()
