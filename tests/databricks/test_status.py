"""What Databricks answers of a submitted run while its train job follows it (snakeddp.databricks.status): the
SDK's own wait polls the local workspace stub (tests/databricks_server.py), each polled state goes into the
run's status.json, and `snakeddp status` typed meanwhile shows the run queued for its cluster, then running."""

from __future__ import annotations

from datetime import timedelta

from databricks.sdk import WorkspaceClient

from snakeddp.databricks import status as databricks_status
from snakeddp.remote import status as remote_status
from snakeddp.run import status
from tests.helpers import typed_status

TOKEN = "dapi-5a7e-status-stub-token"
WHAT = "Databricks run 1001"


def test_the_runs_row_follows_what_databricks_answers_from_submission_to_its_end(stub, tmp_path):
    run_dir = tmp_path / "results" / "runs" / "base"
    run_dir.mkdir(parents=True)
    stub.runs[1001] = {"run_id": 1001, "state": {"life_cycle_state": "PENDING", "state_message": "Waiting for cluster"}}
    remote_status.submitted(run_dir, WHAT)
    assert (typed_status(tmp_path)["state"], typed_status(tmp_path)["detail"]) == ("queued", f"{WHAT} submitted")

    # The cluster comes up, the run runs, and ends: each change once the SDK's wait has polled the state before it.
    # (On a timer, 1.5 s and 5 s in, a loaded machine's slow set-up of the client, or the SDK's polls 2-3 s apart by
    # then, could miss a state.)
    after = {
        "PENDING": {"life_cycle_state": "RUNNING", "state_message": "In run"},
        "RUNNING": {"life_cycle_state": "TERMINATED", "result_state": "SUCCESS", "state_message": ""},
    }
    rows = []
    follow = databricks_status.follow(run_dir, WHAT)

    def polled(run) -> None:
        follow(run)
        rows.append(typed_status(tmp_path))
        stub.runs[1001]["state"] = after[run.state.life_cycle_state.value]

    client = WorkspaceClient(host=stub.url, token=TOKEN)
    ended = client.jobs.wait_get_run_job_terminated_or_skipped(1001, timeout=timedelta(seconds=60), callback=polled)
    assert ended.state.result_state.value == "SUCCESS"
    seen = [(row["state"], row["detail"]) for row in rows]
    assert seen[0] == ("queued", f"{WHAT} PENDING") and ("running", f"{WHAT} RUNNING") in seen, seen
    assert seen.index(("running", f"{WHAT} RUNNING")) > 0 and len(set(seen)) == 2, seen
    remote_status.ended(run_dir, "completed")
    assert (typed_status(tmp_path)["state"], typed_status(tmp_path)["eta_s"]) == ("done", 0.0)
    assert status.read(run_dir)["writer"] == "launcher"


def test_a_waiting_run_of_every_kind_is_queued_and_a_run_without_state_is_not_taken_for_one():
    from databricks.sdk.service.jobs import Run

    for life in ("QUEUED", "PENDING", "BLOCKED", "WAITING_FOR_RETRY"):
        assert databricks_status.state_of(Run.from_dict({"state": {"life_cycle_state": life}})) == (life, True)
    assert databricks_status.state_of(Run.from_dict({"state": {"life_cycle_state": "TERMINATING"}})) == (
        "TERMINATING", False
    )  # fmt: skip
    assert databricks_status.state_of(Run.from_dict({})) == ("UNKNOWN", False)
