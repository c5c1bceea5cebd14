"""What Snakemake's process relays to its jobs when a stop reaches it alone, and how a job started cold takes it.

SIGINT or SIGTERM sent to Snakemake's process alone (`kill PID`, a CI runner, systemd; SIGHUP counts as SIGTERM)
would not reach its jobs, which only a terminal's Ctrl-C or a kill of the process group signals too: Snakemake's
process sends each job's process that handles it a real-time signal that stands for the stop
(snakeddp.workflow.interrupt). A job forked from the warm process gets it in its client, which passes the stop on
(snakeddp.util.handoff); a job that runs cold takes it in its top process (``take``). Either way a job acts on a
stop once: a process group's signal is pending in the job before Snakemake's process can relay it, and is taken
first (the lower-numbered signal), so the relay that follows is not acted on again.

A closed terminal (or ssh session) whose interactive shell ran Snakemake in its foreground hangs up Snakemake's whole
process group: the shell sends SIGHUP to Snakemake and to each job's top process beside it, and Snakemake's process
relays it as SIGTERM. A job's top process that acts on stops takes SIGHUP as that SIGTERM (``stop_for``,
``with_hangup``), once.

A stop that comes while a job's top process still imports (its first tenths of a second, seconds on a busy node)
would end it by its default before it could record anything: a launcher holds the stops from its first line
(``hold``) until its own handlers take the ones that came (``take_held``), or lets them act as they would have
(``let_go``) where it sets none.

On the ground floor, beside the hand-off that imports it: every step imports it before anything else, so it
imports only what a bare interpreter has.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

#: The real-time signals that nothing else sends, each standing for the stop Snakemake's process got alone.
RELAYED = {signal.SIGRTMIN + 4: signal.SIGINT, signal.SIGRTMIN + 5: signal.SIGTERM}
#: Set in Snakemake's environment (so in every job's) once its process relays: a job that runs cold then takes them.
RELAYING = "SNAKEDDP_RELAYING"

#: The cold job's record of the signals Python caught, one byte each, in the order they came (its wake-up fd's
#: other end): it says whether a stop came before its relay, whatever handler the job set for the stop since. A
#: job that set a wake-up fd of its own (asyncio's add_signal_handler; none does) would leave the relays unread.
_caught: int | None = None
#: The stops this process got itself: their relays are not acted on again (as a warm job's client does).
_got: set[int] = set()
#: The stops ``hold`` noted, in the order they came, and the handlers they had before it.
_held: list[int] = []
_before_hold: dict[int, object] = {}


def stop_for(signum: int) -> int:
    """The stop a signal a job's top process got stands for: SIGHUP (its terminal hung up) is SIGTERM's, the stop
    Snakemake's process relays for it; any other stands for itself."""
    return signal.SIGTERM if signum == signal.SIGHUP else signum


def with_hangup(stops: tuple[int, ...]) -> tuple[int, ...]:
    """``stops`` and SIGHUP, the signals a job's top process acts on (as ``stop_for`` says), unless SIGHUP is
    ignored (`nohup`, which Snakemake's process honours too: the terminal's end is not a stop there)."""
    return stops if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else (*stops, signal.SIGHUP)


@contextlib.contextmanager
def handled(stops: tuple[int, ...], handler: Callable[[int, object], None]) -> Iterator[None]:
    """``handler`` set for each of ``stops`` while the block runs, and the handlers before it put back after."""
    previous = {signum: signal.signal(signum, handler) for signum in stops}
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)


def hold(stops: tuple[int, ...]) -> None:
    """Note each of ``stops`` (and SIGHUP, as ``with_hangup`` says) that comes from now on, instead of its default
    (death, before anything is recorded; Ctrl-C's traceback from wherever it landed): for a job's top process,
    from its first line to where its own handlers are set. One ignored (`nohup`, a script's `&`) stays ignored."""
    for signum in with_hangup(stops):
        previous = signal.getsignal(signum)
        if previous != signal.SIG_IGN:
            _before_hold.setdefault(signum, previous)
            signal.signal(signum, _noted)


def _noted(signum: int, frame: object) -> None:
    _held.append(signum)
    _got.add(stop_for(signum))  # as its wake-up fd's byte would say, had it come after ``take``


def take_held() -> list[int]:
    """The stops held since ``hold``, in the order they came, now the caller's to act on: call it with them
    blocked, right after setting its own handlers (those still held get back the handlers they had)."""
    taken = list(_held)
    _held.clear()
    for signum, previous in _before_hold.items():
        if signal.getsignal(signum) is _noted:
            signal.signal(signum, previous)  # type: ignore[arg-type]
    _before_hold.clear()
    return taken


def let_go() -> None:
    """The stops held back act now, as they would have when they came (their handlers put back): where the
    process sets no handlers of its own for them (a remote platform's job sets its own later)."""
    for signum in take_held():
        signal.raise_signal(signum)


def take() -> None:
    """Take Snakemake's relays in this process, the top one of a job that runs cold: no client passes them on.
    A relay acts as the stop it stands for, on the handler the job has for that stop when it comes (snakeddp.launch's
    passes it on to the ranks, a remote job's cancels it, Python's raises KeyboardInterrupt, SIGTERM's default
    ends the process). Only where Snakemake relays: a real-time signal's default kills, so Snakemake's process
    sends one only to a process that handles it, and a step run by hand keeps a fresh interpreter's handlers."""
    global _caught
    if _caught is not None or RELAYING not in os.environ:
        return
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)  # a full pipe drops a byte rather than stopping the signal handler
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    _caught = read
    for relay in RELAYED:
        signal.signal(relay, _acted_on)


def _acted_on(relay: int, frame: object) -> None:
    """Act on every relay caught since the last one, unless this process got its stop before it."""
    stops = []
    for signum in _read_all(_caught):
        if signum in RELAYED.values() or signum == signal.SIGHUP:
            _got.add(stop_for(signum))
        elif signum in RELAYED and RELAYED[signum] not in _got:
            stops.append(RELAYED[signum])
    for stop in stops:
        handler = signal.getsignal(stop)
        if callable(handler):
            handler(stop, frame)
        elif handler != signal.SIG_IGN:
            signal.raise_signal(stop)  # its default (the process ends), or a handler set outside Python


def _read_all(fd: int | None) -> bytes:
    caught = b""
    while fd is not None:
        try:
            chunk = os.read(fd, 512)
        except BlockingIOError:
            break
        if not chunk:
            break
        caught += chunk
    return caught
