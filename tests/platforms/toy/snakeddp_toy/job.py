"""A toy train job (snakeddp.remote.job.RemoteJob): the run's request written beside the code snapshot,
handed to the toy queue (a detached process, ``python -m snakeddp_toy.queue REQUEST``), followed until it
ends, its run directory collected back. Under ``results/runs/<run>/toy/``: code/ (the snapshot, run.yaml, the
environment record), resume/ (the attempt staged), request.json, and job/ (what the queue made: the job's
run directory, each rank's log, ended.json)."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from snakeddp.remote import inherited
from snakeddp.remote.attempt import collect
from snakeddp.remote.job import RemoteJob, Submitted
from snakeddp.run import attempt
from snakeddp.run.layout import RUN_FILE, RunPaths
from snakeddp.util.fsutil import atomic_write_json, read_json
from snakeddp.util.hashing import sha256_json
from snakeddp_toy import PLATFORM, ToyError
from snakeddp_toy.settings import from_environment

ENVIRONMENT_FILE = "environment.json"
POLL_S = 0.1


class ToyJob(RemoteJob):
    name = PLATFORM
    error = ToyError

    @property
    def job_dir(self) -> Path:
        return self.folder.root / "job"

    @property
    def sends(self) -> bool:
        return True  # no section to say otherwise: only a dry run stops at the request

    def environment(self) -> dict[str, Any]:
        identity = {"platform": PLATFORM, "python": platform.python_version()}
        return {"format": "snakeddp-toy-environment/1", "stage": "train", **identity, "hash": sha256_json(identity)}

    def prepare(self, identity: attempt.Identity, resume_dir: Path | None) -> Path:
        code = self.folder.snapshot()
        self.run.write(code / RUN_FILE)
        atomic_write_json(code / ENVIRONMENT_FILE, self.environment())
        entry = [sys.executable, "-m", "snakeddp.remote.entry"]
        entry += [*(["--resume-from", str(resume_dir)] if resume_dir is not None else []), "train", "--"]
        train = ["--config", RUN_FILE, "--run-dir", str(self.job_dir / "run"), "--data", str(self.args.data.resolve())]
        train += ["--launcher", "env", "--environment-record", ENVIRONMENT_FILE]
        request = {
            "command": [*entry, *train],
            "cwd": str(code),
            "ranks": self.launch.devices,
            "node": from_environment(os.environ).node,  # the toy's own setting, as the workflow handed it
            "variables": inherited.variables(PLATFORM),
            "job": str(self.job_dir),
        }
        return atomic_write_json(self.folder.root / "request.json", request)

    def unsent(self, request: Path) -> int:
        self.say(f"wrote the request of run {self.run.run_id}: {request}")
        print(f"  submit it with: {sys.executable} -m snakeddp_toy.queue {request}", flush=True)
        return 0

    def connect(self) -> Path:
        return self.folder.root / "request.json"  # no credentials: the queue is this machine's

    def submit(self, session: Path) -> Submitted:
        self.job_dir.mkdir(parents=True, exist_ok=True)
        (self.job_dir / "ended.json").unlink(missing_ok=True)
        with (self.job_dir / "queue.log").open("w") as log:
            # A session of its own, as a cloud's scheduler is no child of the terminal: a Ctrl-C there
            # reaches the train job, which cancels the job (cancel).
            queue = subprocess.Popen(
                [sys.executable, "-m", "snakeddp_toy.queue", str(session)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        job_id = f"toy-{queue.pid}"
        return Submitted("the toy queue", "job", job_id, handle=queue, record={"job": job_id})

    def wait(self, session: Path, job: Submitted) -> dict[str, Any]:
        ended = self.job_dir / "ended.json"
        while not ended.is_file():
            if job.handle.poll() is not None and not ended.is_file():
                return {"status": "Lost", "codes": [], "said": f"the queue exited {job.handle.returncode}"}
            time.sleep(POLL_S)
        job.handle.wait()
        return read_json(ended)

    def cancel(self, session: Path, job: Submitted) -> None:
        try:
            os.killpg(job.handle.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        job.handle.wait(timeout=60)

    def fetch(self, session: Path, job: Submitted, ended: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        collected = collect(self.job_dir / "run", self.args.run_dir) if (self.job_dir / "run").is_dir() else False
        return collected, {"status": ended["status"], "codes": ended["codes"]}

    def judge(self, job: Submitted, ended: dict[str, Any]) -> None:
        if ended["status"] != "Completed":
            said = ended.get("said") or last_line(self.job_dir / "logs", ended["codes"])
            raise ToyError(
                f"toy job {job.id} ended {ended['status']}: {said}. HINT: read {self.job_dir / 'logs'}, then rerun: "
                "it resumes from what the job saved."
            )
        if not RunPaths(self.args.run_dir).provenance.is_file():
            raise ToyError(f"toy job {job.id} completed without provenance.json. HINT: read {self.job_dir / 'logs'}.")


def last_line(logs: Path, codes: list[int]) -> str:
    """The last line the first failed rank wrote."""
    failed = next((rank for rank, code in enumerate(codes) if code != 0), 0)
    log = logs / f"rank-{failed}.log"
    lines = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
    return json.dumps(lines[-1]) if lines else f"rank {failed} wrote nothing"
