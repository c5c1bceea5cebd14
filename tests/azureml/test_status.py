"""What AzureML answers of a submitted job while its train job streams the job's logs (snakeddp.azureml.status):
the submitter's own wait (AzureMLJob.wait over V2Session's stream and status) asks the job's status beside the
stream, each answer goes into the run's status.json, and `snakeddp status` typed meanwhile shows the job queued
for its compute, then running. No workspace is reachable here: the client's jobs answer offline with the SDK's
own job entity, built from the REST body the service sends (its status field set), as ``jobs.get`` builds it.
The SDK v1 statuses (marked azureml_v1) are checked in .venv-azureml-v1 (tests/azureml/test_sdk_v1.py)."""

from __future__ import annotations

import copy
import json
import threading
import time
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest
from azure.ai.ml.entities import CommandJob, Job
from azure.core.exceptions import HttpResponseError

from snakeddp.azureml import status as azureml_status
from snakeddp.azureml import submit
from snakeddp.azureml.jobs_v2 import V2Session
from snakeddp.azureml.submitted import Outcome, SubmittedJob
from snakeddp.remote import status as remote_status
from snakeddp.remote.job import Submitted
from snakeddp.run import status
from snakeddp.run.variables import PLATFORM_SECTION as AZUREML_CONFIG
from tests.helpers import TINY, make_run, typed_status

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning"),
    pytest.mark.dev_venv,  # the azureml profile imports the AzureML SDK
]
NAME = "olive_cup_7xk2"
WHAT = f"AzureML job {NAME}"
POLL_S = 0.1
CONFIG = {"compute": "gpu-cluster", "submit": False}


class Jobs:
    """azure-ai-ml's JobOperations as far as V2Session's stream and status use them, answering offline:
    ``get`` returns the entity the SDK builds from the service's answer, ``stream`` blocks until the job ended
    (or raises what the test gives it, as a Ctrl-C does), ``failures`` calls of ``get`` fail first."""

    def __init__(self, status: str = "Queued", failures: int = 0) -> None:
        self.status, self.failures = status, failures
        self.ended = threading.Event()
        self.raises: BaseException | None = None

    def get(self, name: str) -> Job:
        assert name == NAME, name
        if self.failures:
            self.failures -= 1
            raise HttpResponseError(message="(ServiceUnavailable) The service is busy.\nCode: ServiceUnavailable")
        rest = CommandJob(command="python -m snakeddp.remote.entry", environment="azureml:snakeddp:1", name=NAME)
        body = rest._to_rest_object()
        body.properties.status = self.status  # read-only: only the service's answer carries it
        return Job._from_rest_object(body)

    def stream(self, name: str) -> None:
        assert name == NAME, name
        assert self.ended.wait(60), "the test never ended the job"
        if self.raises is not None:
            raise self.raises


def followed(tmp_path: Path, monkeypatch, jobs: Jobs) -> tuple[Path, submit.AzureMLJob, V2Session, Submitted]:
    """The train job's submitter for run base (AzureMLJob), its session (V2Session: its __init__ opens the
    workspace, so it is made without it and its client's jobs answer offline) and the job it submitted."""
    monkeypatch.setattr(azureml_status, "POLL_S", POLL_S)
    monkeypatch.setenv(AZUREML_CONFIG, json.dumps(CONFIG))
    run_yaml, manifest = make_run(tmp_path, copy.deepcopy(TINY))
    args = Namespace(config=run_yaml, run_dir=run_yaml.parent, data=manifest, environment_record=None, dry_run=False)
    session = object.__new__(V2Session)
    session.client = SimpleNamespace(jobs=jobs)
    job = Submitted("AzureML", "job", NAME, handle=SubmittedJob(NAME, None))
    remote_status.submitted(run_yaml.parent, job.what)
    return run_yaml.parent, submit.AzureMLJob(args), session, job


def shown(run_dir: Path, detail: str, timeout: float = 30.0) -> bool:
    """Whether status.json comes to say ``detail`` within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (status.read(run_dir) or {}).get("detail") == detail:
            return True
        time.sleep(POLL_S / 2)
    return False


def pollers() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "snakeddp-azureml-status"]


def test_the_runs_row_follows_what_azureml_answers_while_the_logs_stream(tmp_path, monkeypatch):
    jobs = Jobs("Queued")
    run_dir, submitter, session, job = followed(tmp_path, monkeypatch, jobs)
    assert (typed_status(tmp_path)["state"], typed_status(tmp_path)["detail"]) == ("queued", f"{WHAT} submitted")
    rows, missed = [], []

    def the_service() -> None:  # the job waits for its compute, runs, completes; `snakeddp status` typed between
        try:
            for answer in ("Queued", "Running"):
                jobs.status = answer
                if not shown(run_dir, f"{WHAT} {answer}"):
                    missed.append(answer)
                    return
                rows.append(typed_status(tmp_path))
            jobs.status = "Completed"
        finally:
            jobs.ended.set()  # the stream returns

    service = threading.Thread(target=the_service, daemon=True)
    service.start()
    ended = submitter.wait(session, job)
    service.join(timeout=120)
    assert not missed, f"status.json never said {missed[0]}: {status.read(run_dir)}"
    assert ended == Outcome("Completed") and ended.completed
    seen = [(row["state"], row["detail"]) for row in rows]
    assert seen == [("queued", f"{WHAT} Queued"), ("running", f"{WHAT} Running")], seen
    assert not pollers(), "the poller stops when the stream returns"
    remote_status.ended(run_dir, "completed")
    time.sleep(5 * POLL_S)  # a poller left behind would write the job's Completed over the verdict by now
    assert (typed_status(tmp_path)["state"], typed_status(tmp_path)["eta_s"]) == ("done", 0.0)
    assert status.read(run_dir)["writer"] == "launcher"


def test_a_status_call_that_fails_is_said_once_and_the_stream_decides(tmp_path, monkeypatch, capsys):
    jobs = Jobs("Running", failures=4)
    run_dir, submitter, session, job = followed(tmp_path, monkeypatch, jobs)

    def the_service() -> None:  # four polls fail, then the service answers; the job then ends failed
        try:
            shown(run_dir, f"{WHAT} Running")
        finally:
            jobs.status = "Failed"
            jobs.ended.set()

    threading.Thread(target=the_service, daemon=True).start()
    ended = submitter.wait(session, job)
    assert ended == Outcome("Failed") and not ended.completed
    assert str(ended.status) == "Failed", "the train job's line says AzureML's name, not the SDK's enum member"
    lines = [line for line in capsys.readouterr().out.splitlines() if "could not ask AzureML" in line]
    assert lines == [
        f"snakeddp.azureml: could not ask AzureML for the status of {WHAT} ((ServiceUnavailable) The service is "
        "busy.); its row in `snakeddp status` keeps the last state it had while the job's logs stream on"
    ], lines
    assert jobs.failures == 0 and status.read(run_dir)["detail"] in (f"{WHAT} Running", f"{WHAT} Failed")
    assert not pollers()


def test_ctrl_c_in_the_stream_stops_the_poller_before_the_job_is_cancelled(tmp_path, monkeypatch):
    jobs = Jobs("Running")
    run_dir, submitter, session, job = followed(tmp_path, monkeypatch, jobs)
    jobs.raises = KeyboardInterrupt()
    running = []

    def the_service() -> None:  # Ctrl-C once the job runs
        try:
            running.append(shown(run_dir, f"{WHAT} Running"))
        finally:
            jobs.ended.set()

    threading.Thread(target=the_service, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        submitter.wait(session, job)
    assert running == [True], status.read(run_dir)
    assert not pollers()
    remote_status.ended(run_dir, "interrupted")  # as RemoteJob.follow says it, after the cancel
    time.sleep(5 * POLL_S)
    assert status.read(run_dir)["state"] == "stopped"


def sdk_v2_statuses() -> set[str]:
    """Every status azure-ai-ml names: its REST models' enum and its run history's constants (the stream's)."""
    from azure.ai.ml._restclient.arm_ml_service.models import JobStatus
    from azure.ai.ml.operations._run_history_constants import JobStatus as RunHistoryStatus

    constants = {value for key, value in vars(RunHistoryStatus).items() if key.isupper()}
    return {member.value for member in JobStatus} | constants


def test_every_status_of_azure_ai_ml_is_waiting_or_not():
    statuses = sdk_v2_statuses()
    assert {"Queued", "Running", "Completed"} <= statuses, statuses
    assert statuses <= set(azureml_status.WAITING), f"unmapped: {sorted(statuses - set(azureml_status.WAITING))}"
    waiting = {name for name in statuses if azureml_status.state_of(name)[1]}
    assert waiting == {"NotStarted", "Starting", "Provisioning", "Preparing", "Queued"}


def test_the_sdks_enum_member_and_no_status_read_as_azuremls_names():
    from azure.ai.ml._restclient.arm_ml_service.models import JobStatus

    assert azureml_status.state_of(JobStatus.PREPARING) == ("Preparing", True)
    assert azureml_status.state_of(JobStatus.FINALIZING) == ("Finalizing", False)
    assert azureml_status.state_of("queued") == ("Queued", True)  # the service's enum is case-insensitive
    assert azureml_status.state_of(None) == ("Unknown", False)
    assert azureml_status.state_of("Hibernating") == ("Hibernating", False)  # a name no SDK had: not queued


@pytest.mark.azureml_v1
def test_every_status_of_azureml_core_is_waiting_or_not():
    from azureml._restclient.constants import RunStatus
    from azureml.data._restclient.runhistory.models import RunStatus as SpanStatus

    statuses = set(RunStatus.list()) | {member.value for member in SpanStatus}
    assert {"Queued", "Running", "Completed"} <= statuses, statuses
    assert statuses <= set(azureml_status.WAITING), f"unmapped: {sorted(statuses - set(azureml_status.WAITING))}"
    waiting = {name for name in statuses if azureml_status.state_of(name)[1]}
    assert waiting == {"NotStarted", "Starting", "Provisioning", "Preparing", "Queued", "Unapproved"}
