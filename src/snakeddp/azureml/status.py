"""What AzureML answers about a submitted job while its train job streams the job's logs: the job's status as
snakeddp's (snakeddp.remote.status), asked every POLL_S on a thread of its own and written to the run's
status.json, so that `snakeddp status` shows a job queued for its compute apart from one running there.

The SDKs' own waits (azure-ai-ml's ``jobs.stream``, azureml-core's ``wait_for_completion``) block and take no
callback, unlike Databricks' (snakeddp.databricks.status), hence the thread. The stream decides how the job
ended: a status call that fails is said once and changes nothing else.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from snakeddp.remote import status as remote_status
from snakeddp.util import threads

# How often the job's status is asked while its logs stream (a test may set it short).
POLL_S = 30.0

# Every status a job has in azure-ai-ml (its REST models' JobStatus, its run history's) and azureml-core (its
# RunStatus): whether the job still waits to run (compute being found, sized, its image built, a slot, approval).
WAITING = {
    "NotStarted": True,
    "Starting": True,
    "Provisioning": True,
    "Preparing": True,
    "Queued": True,
    "Unapproved": True,
    "Running": False,
    "Finalizing": False,
    "CancelRequested": False,
    "Canceled": False,
    "Completed": False,
    "Failed": False,
    "NotResponding": False,
    "Pausing": False,
    "Paused": False,
    "Unknown": False,
}
_BY_LOWER = {name.lower(): name for name in WAITING}


def name_of(status: Any) -> str:
    """AzureML's name for a status as an SDK hands it: a plain string, or azure-ai-ml's enum member (which
    formats as "JobStatus.RUNNING", not as its value); None (no status yet) is Unknown."""
    value = getattr(status, "value", status)
    return _BY_LOWER.get(str(value).lower(), str(value)) if value else "Unknown"


def state_of(status: Any) -> tuple[str, bool]:
    """The job's status as AzureML names it, and whether it still waits to run (a name no SDK had: no)."""
    name = name_of(status)
    return name, WAITING.get(name, False)


class Poller:
    """Asks ``ask`` (the job's status) at once and then every POLL_S until stopped, each answer into the run's
    status.json; nothing is written once ``stop`` returned, even where an answer was on its way."""

    def __init__(self, run_dir: Path, what: str, ask: Callable[[], Any]) -> None:
        self.run_dir, self.what, self.ask = run_dir, what, ask
        self.stopped = threading.Event()
        self.lock = threading.Lock()  # a write and the stop, one after the other
        self.failed = False
        self.thread = threading.Thread(target=self._run, name="snakeddp-azureml-status", daemon=True)

    def start(self) -> None:
        threads.start(self.thread)  # a stop cancels the job: the main thread's wait takes it

    def stop(self) -> None:
        with self.lock:
            self.stopped.set()
        self.thread.join(timeout=1.0)  # a status call still in flight ends on its own; it writes nothing

    def _run(self) -> None:
        while not self.stopped.is_set():
            self._poll()
            self.stopped.wait(POLL_S)

    def _poll(self) -> None:
        try:
            state, waiting = state_of(self.ask())
        except Exception as error:  # the service, the network, the credential: the stream goes on regardless
            self._failed(error)
            return
        with self.lock:
            if not self.stopped.is_set():
                remote_status.said(self.run_dir, self.what, state, waiting)

    def _failed(self, error: Exception) -> None:
        if not self.failed and not self.stopped.is_set():
            self.failed = True
            said = (str(error).strip().splitlines() or [type(error).__name__])[0]
            print(
                f"snakeddp.azureml: could not ask AzureML for the status of {self.what} ({said}); its row in "
                "`snakeddp status` keeps the last state it had while the job's logs stream on",
                flush=True,
            )


@contextmanager
def polled(run_dir: Path, what: str, ask: Callable[[], Any]) -> Iterator[Poller]:
    """The job's status polled into status.json while the block runs (its stream); stopped however it ends."""
    poller = Poller(run_dir, what, ask)
    poller.start()
    try:
        yield poller
    finally:
        poller.stop()
