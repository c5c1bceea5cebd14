"""snakeddp.remote.job: the sequence every remote platform's train job follows, driven by the smallest
RemoteJob there is (each step says it ran, the request is a file, the job ends as told) on a real run."""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from snakeddp.errors import ConfigError
from snakeddp.remote.folder import RECORD_FILE
from snakeddp.remote.job import INTERRUPTED_EXIT_CODE, RemoteJob, Submitted
from snakeddp.run import attempt
from snakeddp.util import terminal
from snakeddp.util.fsutil import read_json
from tests.helpers import TINY, make_run


class ToyError(ConfigError):
    pass


class ToyJob(RemoteJob):
    name = "toy"
    error = ToyError

    def __init__(self, args: argparse.Namespace, ends: str | signal.Signals = "Completed", sends: bool = True) -> None:
        super().__init__(args)
        self.ends, self._sends, self.steps = ends, sends, []
        self.identity: attempt.Identity | None = None

    def environment(self) -> dict[str, Any]:
        return {"toy": "1"}

    def prepare(self, identity: attempt.Identity, resume_dir: Path | None) -> Path:
        self.steps.append("prepare")
        self.identity = identity
        self.folder.root.mkdir(parents=True, exist_ok=True)
        request = self.folder.root / "request.json"
        request.write_text(json.dumps({"run": self.run.run_id, "key": identity.key, "resume": str(resume_dir)}))
        return request

    @property
    def sends(self) -> bool:
        return self._sends

    def unsent(self, request: Path) -> int:
        self.steps.append("unsent")
        return 0

    def connect(self) -> Any:
        self.steps.append("connect")
        return "session"

    def stage(self, session: Any) -> None:
        self.steps.append("stage")

    def stage_run(self, session: Any, resume_dir: Path | None) -> None:
        self.steps.append("stage_run")

    def submit(self, session: Any) -> Submitted:
        self.steps.append("submit")
        return Submitted("Toy", "job", "7", record={"job_id": "7"})

    def wait(self, session: Any, job: Submitted) -> Any:
        self.steps.append("wait")
        if isinstance(self.ends, signal.Signals):  # sent as a terminal, a user or a scheduler sends it
            signal.raise_signal(self.ends)
            return "Completed"  # it stopped nothing
        return self.ends

    def cancel(self, session: Any, job: Submitted) -> None:
        self.steps.append("cancel")

    def fetch(self, session: Any, job: Submitted, ended: Any) -> tuple[bool, dict[str, Any]]:
        self.steps.append("fetch")
        return True, {"status": ended}

    def judge(self, job: Submitted, ended: Any) -> None:
        self.steps.append("judge")
        if ended != "Completed":
            raise self.error(f"{job.what} ended {ended}. HINT: read its logs.")


@pytest.fixture
def args(tmp_path):
    run_yaml, manifest = make_run(tmp_path, TINY)
    return argparse.Namespace(config=run_yaml, run_dir=run_yaml.parent, data=manifest, dry_run=False)


def test_a_dry_run_writes_the_request_for_this_runs_identity_and_sends_nothing(args):
    job = ToyJob(argparse.Namespace(**{**vars(args), "dry_run": True}))
    assert job.main() == 0 and job.steps == ["prepare", "unsent"]
    request = json.loads((args.run_dir / "toy" / "request.json").read_text())
    assert request == {"run": "base", "key": job.identity.key, "resume": "None"}
    assert not (args.run_dir / "toy" / RECORD_FILE).exists()


def test_a_platform_told_not_to_submit_stops_at_its_request_too(args):
    job = ToyJob(args, sends=False)
    assert job.main() == 0 and job.steps == ["prepare", "unsent"]


def test_a_submitted_job_is_staged_followed_fetched_and_judged_in_order_and_recorded(args, capsys, monkeypatch):
    relayed: list[str] = []
    relay = terminal.Relay(relayed.append)  # Snakemake's terminal, which the job's progress reaches too
    monkeypatch.setenv(terminal.VARIABLE, relay.start())
    job = ToyJob(args)
    assert job.main() == 0
    relay.close()
    assert job.steps == ["prepare", "connect", "stage", "stage_run", "submit", "wait", "fetch", "judge"]
    kept = read_json(args.run_dir / "toy" / RECORD_FILE)
    assert (kept["job_id"], kept["status"], kept["collected"]) == ("7", "Completed", True)
    said = capsys.readouterr().err
    assert "snakeddp.toy: run base submitted as Toy job 7" in said and "run base completed" in said
    assert "snakeddp.toy: run base submitted as Toy job 7" in relayed and relayed[-1].endswith("run base completed; "
        f"results in {args.run_dir}")  # fmt: skip


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_waiting_cancels_the_job_and_exits_130(args, signum):
    """Ctrl-C, a scheduler's SIGTERM, or a closed terminal's SIGHUP (its shell hangs up the train job's process
    group, the launcher that runs this job): the job is cancelled, not left running."""
    # This process's own, where the job would leave SIGHUP alone: the wait then goes on, and the job completes.
    outside = signal.signal(signal.SIGHUP, lambda signum, frame: None)
    try:
        job = ToyJob(args, ends=signum)
        assert job.main() == INTERRUPTED_EXIT_CODE
    finally:
        signal.signal(signal.SIGHUP, outside)
    assert job.steps[-2:] == ["wait", "cancel"]
    assert read_json(args.run_dir / "toy" / RECORD_FILE)["status"] == "CancelRequested"


def test_a_job_that_failed_is_one_line_with_a_hint_and_its_end_is_kept(args):
    job = ToyJob(args, ends="Failed")
    with pytest.raises(ToyError, match=r"^Toy job 7 ended Failed\. HINT: ") as failed:
        job.main()
    assert "\n" not in str(failed.value)
    kept = read_json(args.run_dir / "toy" / RECORD_FILE)
    assert (kept["status"], kept["collected"]) == ("Failed", True)
