"""One run's train job on a remote platform, as ``python -m snakeddp.launch`` runs it there: the sequence
each remote platform follows, owned here once.

1. a finished attempt of this config, data and environment is restored (nothing submitted); a shorter
   finished budget is continued;
2. the attempt to resume is staged (``attempt.stage_resume``) and the platform writes its request;
   a dry run, or a platform told not to submit, stops here;
3. the platform connects (its credentials checked before anything is uploaded), stages what the job
   reads, and the run directory is prepared as launch prepares it;
4. the job is submitted and waited for; a signal (Ctrl-C, a scheduler's SIGTERM, a closed terminal's SIGHUP)
   cancels it: exit 130;
5. what its run directory held comes back (what it saved too, so a failed run resumes), and the
   platform judges the end: anything but success is one line with a HINT, exit 1.

Every step is recorded in the folder's submission.json. A platform subclasses ``RemoteJob`` with the
steps that are its own.
"""

from __future__ import annotations

import argparse
import signal
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snakeddp.config.parts import Launch
from snakeddp.errors import ConfigError, print_line
from snakeddp.provenance import lineage
from snakeddp.remote import status as remote_status
from snakeddp.remote.attempt import stage_resume, takeover
from snakeddp.remote.folder import Folder
from snakeddp.run import attempt
from snakeddp.run.runfile import RunFile
from snakeddp.util import relays, terminal

INTERRUPTED_EXIT_CODE = 130


@dataclass(frozen=True)
class Submitted:
    """A job the platform took: whose it is and what it calls it ("AzureML", "job", its name), its page,
    the platform's handle, and what submission.json keeps of it."""

    owner: str
    kind: str
    id: str
    url: str | None = None
    handle: Any = None
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def what(self) -> str:
        return f"{self.owner} {self.kind} {self.id}"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGINT raise KeyboardInterrupt while the job is waited for, so it is cancelled; so does a closed
    terminal's SIGHUP (snakeddp.util.relays), unless ignored."""
    with relays.handled(relays.with_hangup((signal.SIGTERM, signal.SIGINT)), _interrupt):
        yield


class RemoteJob(ABC):
    """The run of ``args`` (snakeddp.launch's: config, run directory, data, dry run) on one platform."""

    #: The platform's name: its folder under the run directory, and its lines' prefix (snakeddp.<name>).
    name: str
    #: The error its refusals are, each one line with a HINT.
    error: type[ConfigError] = ConfigError

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.run = RunFile.load(args.config)
        self.launch = Launch.of(self.run.config["launch"])  # built once: the platform's steps read the part
        self.folder = Folder.of(args.run_dir, self.name)

    def say(self, text: str, err: bool = False) -> None:
        """A line of the job's: into its log, and where it is progress (not ``err``), onto Snakemake's terminal too
        (the job submitted and where to watch it, the job completed)."""
        (print_line if err else terminal.say)(f"snakeddp.{self.name}: {text}")

    # The platform's own steps.
    @abstractmethod
    def environment(self) -> dict[str, Any]:
        """The record of the software the job runs on: the environment part of the attempt key."""

    @abstractmethod
    def prepare(self, identity: attempt.Identity, resume_dir: Path | None) -> Path:
        """Write the request into the folder (and what the job is made of); return the request's file."""

    @property
    @abstractmethod
    def sends(self) -> bool:
        """Whether the request is submitted (the section's ``submit``)."""

    @abstractmethod
    def unsent(self, request: Path) -> int:
        """A request written and not submitted (a dry run, or ``submit: false``): say how to send it."""

    @abstractmethod
    def connect(self) -> Any:
        """A session whose credentials (and target) are checked; nothing is uploaded before it."""

    def stage(self, session: Any) -> None:  # noqa: B027 - a step some platforms leave to their submit
        """Upload what the job reads and outlives the run's attempt (code, data), before the run is prepared."""

    def stage_run(self, session: Any, resume_dir: Path | None) -> None:  # noqa: B027 - likewise
        """Upload the run's own files for this attempt, once its directory is prepared."""

    @abstractmethod
    def submit(self, session: Any) -> Submitted: ...

    @abstractmethod
    def wait(self, session: Any, job: Submitted) -> Any:
        """How the job ended, once it did."""

    @abstractmethod
    def cancel(self, session: Any, job: Submitted) -> None: ...

    @abstractmethod
    def fetch(self, session: Any, job: Submitted, ended: Any) -> tuple[bool, dict[str, Any]]:
        """Bring the job's run directory back into the run's; whether anything came back, and what
        submission.json keeps of the end (status, error)."""

    @abstractmethod
    def judge(self, job: Submitted, ended: Any) -> None:
        """Raise ``error`` in one line with a HINT unless the job succeeded and its provenance.json came back."""

    # The sequence.
    def identify(self) -> tuple[attempt.Identity, lineage.Origin | None]:
        """This run's identity (its config, data and the platform's environment), and the finished attempt of
        another budget it takes over, if any."""
        identity = attempt.Identity.of(self.run.config, self.args.data, self.environment())
        return identity, takeover(self.args.run_dir, identity)

    def stage_attempt(self, identity: attempt.Identity, origin: lineage.Origin | None) -> Path | None:
        """The attempt the job resumes (this key's own) or continues (``origin``), staged in the folder."""
        continued = origin if origin is not None and origin.how == lineage.CONTINUE else None
        return stage_resume(self.args.run_dir, self.folder.resume, identity.key, continued)

    def main(self) -> int:
        args, run = self.args, self.run
        identity, origin = self.identify()
        if not args.dry_run and (
            attempt.restorable(args.run_dir, identity.key) or (origin and origin.how != lineage.CONTINUE)
        ):
            lineage.prepare(args.run_dir, identity, run)
            self.say(f"run {run.run_id}: {lineage.restore(args.run_dir, identity.key)}")
            return 0
        resume_dir = self.stage_attempt(identity, origin)
        request = self.prepare(identity, resume_dir)
        if args.dry_run or not self.sends:
            return self.unsent(request)
        session = self.connect()
        self.stage(session)
        start = lineage.prepare(args.run_dir, identity, run)
        if (start.resume is None) != (resume_dir is None):
            raise self.error(f"{args.run_dir} changed while its job was being prepared. HINT: rerun to submit again.")
        if start.origin is not None:
            self.say(f"run {run.run_id}: {start.origin.continuing(run.run_id, identity.budget)}")
        self.stage_run(session, resume_dir)
        return self.follow(session)

    def follow(self, session: Any) -> int:
        """Submit, wait (a signal cancels), fetch, judge; 0 only when the job succeeded and its record came back."""
        job = self.submit(session)
        self.folder.record(fresh=True, **job.record)
        remote_status.submitted(self.args.run_dir, job.what)
        self.say(f"run {self.run.run_id} submitted as {job.what}" + (f"\n  {job.url}" if job.url else ""))
        try:
            with signals_interrupt():
                ended = self.wait(session, job)
        except KeyboardInterrupt:
            self.cancel(session, job)
            self.folder.record(status="CancelRequested")
            remote_status.ended(self.args.run_dir, "interrupted")
            self.say(f"interrupted; asked {job.owner} to cancel {job.kind} {job.id}", err=True)
            return INTERRUPTED_EXIT_CODE
        collected, kept = self.fetch(session, job, ended)
        self.folder.record(**kept, collected=collected)
        try:
            self.judge(job, ended)
        except Exception:  # the verdict over what the job's own status.json said, if it came back
            remote_status.ended(self.args.run_dir, "failed")
            raise
        remote_status.ended(self.args.run_dir, "completed")
        self.say(f"run {self.run.run_id} completed; results in {self.args.run_dir}")
        return 0
