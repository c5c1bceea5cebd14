"""The ingest step on the databricks platform: a table of two windows or more (snakeddp.data.spread) is read on
the Databricks cluster the profile names, by a one-time Jobs run whose one task runs the ingest step itself on
the cluster's driver, as the platform its row's ``ranks_as`` names runs it: the windows read by tasks on the
cluster's executors, each reading its own row groups from the Lakehouse, the partitions assembled, hashed and
published by the driver. Any other table is ingested by the step, as on the local platform; so is one whose
path is relative (the checkout's, which the cluster does not have), and any where ``databricks.submit`` is false.

The task's command is the data_table rule's, run through the remote jobs' entry from the code snapshot::

    python <stage>/code/<sha256>/snakeddp/remote/entry.py --variables JSON --workdir <stage> steps -- \\
        ingest --params JSON --out OUT

OUT being the step's own --out, so the output lies below ``databricks.stage`` as the step's lies below the
workflow's directory: the dataset's folder, results/data/<dataset>/, where the train jobs stage the dataset and
so find its partitions at their size (they upload the manifest only). The step says that command, shell-quoted,
in its log, submits the run (to the cluster the workflow's runs share once it is running, else
databricks.existing_cluster_id, else a job cluster of ``new_cluster``), waits for it, and copies what the
ingestion wrote back through the Files API, each file at its listed size, into its own output: without the
cluster's stat stamps (written.json), so each partition is checked against its entry (BLAKE3) by what reads it
here.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from snakeddp.config import parts
from snakeddp.data import names as data_names
from snakeddp.data import remote, spread
from snakeddp.data import table as tables
from snakeddp.databricks import PLATFORM, DatabricksError, files, jobside, shared_cluster, spec, staging, workspace
from snakeddp.databricks.settings import Settings, from_environment
from snakeddp.remote import inherited
from snakeddp.remote.folder import ENTRY, Folder
from snakeddp.run import variables as names
from snakeddp.util.fsutil import read_json
from snakeddp.util.terminal import say

# The run's own limit: a window (2^18 rows and more) per executor core, read a row group at a time.
TIMEOUT_S = 4 * 3600
# And how long a new job cluster may take to start before that limit starts counting.
QUEUE_S = 3600
# A job cluster's workers at most: a window per core; a bigger table's windows take turns on them.
MAX_WORKERS = 8
# The entry's command that runs a workflow step (snakeddp.remote.entry.RUNS), and how the step's error line begins
# (snakeddp.steps' exit_code).
STEPS = "steps"
STEP_SAYS = "snakeddp.steps: "


def ingest(params: Mapping[str, Any], out_dir: str | Path, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """table.ingest's outputs, read on the Databricks cluster where the table is spread, else here."""
    out = Path(out_dir)
    prepared = spread.prepare(params, out)
    if prepared is None:  # a table of one window, a CSV, images: not worth a cluster's start
        return tables.ingest(params, out)
    settings = from_environment(env)
    why = here_because(params["table"]["path"], settings)
    if why is not None:
        say(f"ingest: {why}; the table is read here")
        return tables.ingest(params, out)
    return on_cluster(params, out, settings, len(prepared[1]), env)


def here_because(path: str, settings: Settings) -> str | None:
    """Why the step reads the table itself, though it is spread; None where the cluster reads it."""
    if not settings.submit:
        return "databricks.submit is false, so no run is submitted"
    if not settings.stage:
        return "databricks.stage is not set, so the cluster's run has nowhere to write the partitions"
    if not remote.is_url(path) and not Path(path).is_absolute():
        return f"data.table.path {path} is relative to this checkout, which the Databricks cluster does not have"
    return None


def remote_out(out: Path) -> str:
    """The step's output relative to where it runs: the task's --out, below the stage as it is here."""
    relative = Path(os.path.relpath(out.resolve(), Path.cwd().resolve()))
    if relative.parts[:1] == ("..",):
        raise DatabricksError(
            f"the ingest step's output {out} is outside the workflow's directory {Path.cwd()}, so it has no place "
            "below databricks.stage. HINT: run the step from the workflow's directory (snakemake does)."
        )
    return relative.as_posix()


def plan_of(settings: Settings, code: str, pieces: int, shared: str | None) -> spec.JobPlan:
    """The ingestion's job: a job cluster's workers one per window (MAX_WORKERS at most), or the cluster the
    workflow's runs share, or the existing one; on CPUs (the step reads and encodes, it trains nothing)."""
    return spec.JobPlan(
        run_id="ingest",
        nodes=min(pieces, MAX_WORKERS),
        devices=1,
        gpu=False,
        stage=str(settings.stage).rstrip("/"),
        manifest="",
        code=code,
        timeout_s=TIMEOUT_S,
        existing_cluster_id=shared or settings.existing_cluster_id,
        new_cluster=parts.thaw(settings.new_cluster),
    )


def task_parameters(plan: spec.JobPlan, params: Mapping[str, Any], out: str, variables: Mapping[str, str]) -> list[str]:
    """The entry's argv: the variables it exports, the stage it runs in, then the ingest step's own."""
    return [
        "--variables", as_argument(variables), "--workdir", plan.stage, STEPS, "--",
        "ingest", "--params", as_argument(params), "--out", out,
    ]  # fmt: skip


def as_argument(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), sort_keys=True)


def ingest_request(plan: spec.JobPlan, params: Mapping[str, Any], out: str, variables: Mapping[str, str]) -> dict:
    """Keyword arguments of ``WorkspaceClient().jobs.submit``: the SDK's request objects, checked as a run's."""
    from databricks.sdk.service import jobs

    task = jobs.SubmitTask(
        task_key="ingest",
        description=f"snakeddp: ingest {params['table']['path']} into {out}",
        spark_python_task=jobs.SparkPythonTask(
            python_file=f"{plan.stage}/{plan.code}/{ENTRY}", parameters=task_parameters(plan, params, out, variables)
        ),
        timeout_seconds=plan.timeout_s,
    )
    if plan.existing_cluster_id:
        task.existing_cluster_id = plan.existing_cluster_id
    else:
        task.new_cluster = spec.cluster_spec(plan)
    request = {"run_name": f"snakeddp ingest {out}", "tasks": [task], "timeout_seconds": plan.timeout_s}
    spec.check(request)
    return request


def command_line(request: Mapping[str, Any]) -> str:
    """The task's command as the cluster's driver runs it, shell-quoted (for the log, and to run it by hand)."""
    task = request["tasks"][0].spark_python_task
    return shlex.join(["python", task.python_file, *task.parameters])


def job_variables(env: Mapping[str, str]) -> dict[str, str]:
    """What the task exports: what every remote job inherits (the platform its ranks run as: its ingestion too),
    and that platform's section with its defaults (the cluster's own Spark settings). Not the tracking section:
    ingestion logs to no tracker, and its job is sent before any train job's checks (workflow.preflight)."""
    variables = {**inherited.variables(PLATFORM, env), names.PLATFORM_SECTION: "{}"}
    variables.pop(names.TRACKING, None)
    return variables


def on_cluster(
    params: Mapping[str, Any], out: Path, settings: Settings, pieces: int, env: Mapping[str, str]
) -> dict[str, Any]:
    """Stage the code, submit the run that ingests, wait for it, and copy its output back into ``out``."""
    target = remote_out(out)
    shared = None if settings.existing_cluster_id else env.get(jobside.CLUSTER)
    w = workspace.connect(settings.profile)
    with tempfile.TemporaryDirectory(prefix="snakeddp-ingest-") as scratch:
        code_dir = Folder(Path(scratch)).snapshot()
        plan = plan_of(settings, staging.code_path(code_dir), pieces, shared)
        request = ingest_request(plan, params, target, job_variables(env))
        staging.stage_code(w, plan, code_dir)
    say(f"ingest: {pieces} windows read on the Databricks cluster by: {command_line(request)}")
    if shared:
        shared_cluster.ready(w, shared, say)
    ended = run_to_end(w, request)
    judge(w, ended)
    return fetch(w, f"{plan.stage}/{target}", out, params)


def run_to_end(w: Any, request: Mapping[str, Any]) -> Any:
    """Submit the run and wait for its end; interrupted, it is cancelled."""
    try:
        run_id = w.jobs.submit(**request).run_id
    except Exception as error:
        raise workspace.api_error("submitting the ingestion (jobs/runs/submit)", error) from None
    say(f"ingest: Databricks run {run_id}")
    try:
        timeout = timedelta(seconds=TIMEOUT_S + QUEUE_S)
        return w.jobs.wait_get_run_job_terminated_or_skipped(run_id, timeout=timeout)
    except BaseException as error:
        try:
            w.jobs.cancel_run(run_id)
        except Exception:  # noqa: S110 - already ended, or the workspace gone: the first error is the one to say
            pass
        if not isinstance(error, Exception):  # Ctrl-C, the job killed: as it came
            raise
        raise workspace.api_error(f"waiting for Databricks run {run_id}", error) from None


def judge(w: Any, ended: Any) -> None:
    """One line for a run that did not succeed: the ingest step's own where the task said one (a bad value: the
    local ingestion's line, naming its file, column and row), else Databricks' message."""
    state = ended.state
    result = state.result_state.value if state and state.result_state else "without a result"
    if result == "SUCCESS":
        return
    page = f" (its page: {ended.run_page_url})" if ended.run_page_url else ""
    line = step_line(w, ended)
    if line is not None:
        say(f"ingest: Databricks run {ended.run_id} ended {result}{page}; the ingest step there said:")
        raise DatabricksError(line)
    said = (state.state_message if state else "") or "no message"
    raise DatabricksError(
        f"Databricks run {ended.run_id} that ingests the table ended {result}: {said}{page}. HINT: the page has the "
        "driver's log; fix what it says, then rerun."
    )


def step_line(w: Any, ended: Any) -> str | None:
    """The ingest step's one line, the last of its task's output (runs/get-output's ``logs``: a
    spark_python_task's stdout and stderr), without its program's name; None where it said none."""
    task = ended.tasks[0] if ended.tasks else None
    if task is None or task.run_id is None:
        return None
    try:
        logs = w.jobs.get_run_output(task.run_id).logs or ""
    except Exception:  # the output only words the failure better: the run's own state says it otherwise
        return None
    lines = [line for line in logs.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last.removeprefix(STEP_SAYS) if last.startswith(STEP_SAYS) and " HINT: " in last else None


def outputs(params: Mapping[str, Any]) -> list[str]:
    """What an ingestion writes, relative to its output: every partition and its entry, validation's, its summary
    last (the names a run that succeeded has all written again, so none of an earlier run's can come back)."""
    targets = data_names.targets(params["num_train_files"])
    return [f"{name}{suffix}" for name in targets for suffix in (".safetensors", ".json")] + ["ingest.json"]


def fetch(w: Any, folder: str, out: Path, params: Mapping[str, Any]) -> dict[str, Any]:
    """The run's output copied back into ``out``, each file at its listed size, under a partial name until it is
    whole; its summary. The cluster's stat stamps (written.json) stay there: the files are hashed where read."""
    for name in outputs(params):
        remote, target = f"{folder}/{name}", out / name
        listed = files.size(w, remote)
        if listed is None:
            raise DatabricksError(
                f"the Databricks run succeeded, but {remote} is not there. HINT: look at the run's driver log, then "
                "rerun: the table is ingested again."
            )
        # In train/ (the data_table rule's directory output), validation's and the summary's too, then moved to its
        # name: a copy that stops (a dropped connection, the job killed) leaves nothing beside the rule's outputs.
        partial = out / data_names.TRAIN / f".{target.name}.partial"
        try:
            if files.download(w, remote, partial) != listed:
                raise DatabricksError(
                    f"{remote} came back with another size than its listing says ({listed} bytes). HINT: rerun: the "
                    "table is ingested again."
                )
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    return read_json(out / "ingest.json")
