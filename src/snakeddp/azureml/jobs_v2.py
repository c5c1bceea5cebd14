"""SDK v2 (azure-ai-ml) online steps: check the workspace and compute, submit, stream, download, cancel."""

from __future__ import annotations

from pathlib import Path

from azure.ai.ml import MLClient
from azure.ai.ml.exceptions import JobException, MlException
from azure.core.credentials import TokenCredential
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

from snakeddp.azureml import spec_v2, vmsizes
from snakeddp.azureml.plan import OUTPUT_NAME, JobPlan
from snakeddp.azureml.settings import AzureMLError, Workspace
from snakeddp.azureml.status import name_of
from snakeddp.azureml.submitted import Outcome, SubmittedJob


class V2Session:
    """One workspace, reached with azure-ai-ml."""

    def __init__(self, workspace: Workspace, credential: TokenCredential) -> None:
        self.workspace = workspace
        self.client = MLClient(
            credential,
            subscription_id=workspace.subscription_id,
            resource_group_name=workspace.resource_group,
            workspace_name=workspace.workspace_name,
        )
        try:
            self.client.workspaces.get(workspace.workspace_name)
        except ResourceNotFoundError:
            raise AzureMLError(
                f"workspace {workspace.workspace_name!r} not found in resource group {workspace.resource_group!r} "
                f"of subscription {workspace.subscription_id}. HINT: check azureml.workspace (az ml workspace "
                "list -g <resource-group> lists the names). Nothing was uploaded."
            ) from None
        except HttpResponseError as exc:
            raise AzureMLError(
                f"cannot open workspace {workspace.workspace_name!r}: {exc.message}. HINT: the signed-in "
                "identity needs a role on the workspace (e.g. AzureML Data Scientist). Nothing was uploaded."
            ) from None

    def check_compute(self, compute: str, nodes: int, devices: int = 1, accelerator: str = "cpu") -> None:
        try:
            target = self.client.compute.get(compute)
        except ResourceNotFoundError:
            known = sorted(c.name for c in self.client.compute.list())
            raise AzureMLError(
                f"compute {compute!r} not found in workspace {self.workspace.workspace_name!r} "
                f"(it has: {', '.join(known) or 'none'}). HINT: create it with az ml compute create --name "
                f"{compute} --type amlcompute --size <vm-size> --max-instances {nodes}, or set azureml.compute. "
                "Nothing was uploaded."
            ) from None
        max_instances = getattr(target, "max_instances", None)
        if max_instances is not None and max_instances < nodes:
            raise AzureMLError(
                f"compute {compute!r} scales to {max_instances} node(s) but launch.nodes={nodes}. HINT: raise its "
                f"maximum (az ml compute update --name {compute} --max-instances {nodes}) or lower launch.nodes. "
                "Nothing was uploaded."
            )
        size = getattr(target, "size", None)
        if size:
            sizes = self.client.compute.list_sizes(location=getattr(target, "location", None))
            vmsizes.check(compute, size, sizes, devices, accelerator)

    def submit(self, plan: JobPlan, spec: Path, variables: dict[str, str]) -> SubmittedJob:
        """Upload what the spec names (code, dataset, resume folder; each once per content) and submit it."""
        job = spec_v2.load(spec)
        job.environment_variables = {**(job.environment_variables or {}), **variables}
        created = self.client.jobs.create_or_update(job)
        return SubmittedJob(name=created.name, url=created.studio_url)

    def wait(self, job: SubmittedJob) -> Outcome:
        """Stream the job's logs to stdout until it ends."""
        error = None
        try:
            self.client.jobs.stream(job.name)
        except JobException as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):
                raise KeyboardInterrupt from exc
            error = exc.message
        return Outcome(status=self.status(job), error=error)

    def status(self, job: SubmittedJob) -> str:
        """AzureML's status of the job now, by its name ("Running"; the SDK's enum member formats otherwise)."""
        return name_of(self.client.jobs.get(job.name).status)

    def download(self, job: SubmittedJob, destination: Path) -> Path | None:
        """Logs and the run directory output into ``destination``; the run directory's path."""
        try:
            self.client.jobs.download(job.name, download_path=destination, all=True)
        except MlException as exc:
            print(f"snakeddp.azureml: could not download the outputs of {job.name}: {exc.message}", flush=True)
            return None
        return destination / "named-outputs" / OUTPUT_NAME

    def cancel(self, job: SubmittedJob) -> None:
        self.client.jobs.begin_cancel(job.name)
