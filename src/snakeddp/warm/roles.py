"""The two warm processes, each a role of the loop (snakeddp.warm.loop.Server).

The first owns the socket: it checks every request (snakeddp.warm.admission), forks at once every job
that needs nothing the second imports, forwards the rest to the second over their channel
(snakeddp.warm.channel), and marks in its directory when both have imported everything. The second,
forked from the first before either imported anything, imports what takes seconds (torch, Lightning,
the report's matplotlib) and forks the jobs it is forwarded. Each goes away with its parent (the first
with Snakemake, the second with the first), and a first whose second is gone forks its jobs itself.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import socket
from typing import Any

from snakeddp.forking.child import tie_to
from snakeddp.util import handoff
from snakeddp.warm.admission import REQUEST_TIMEOUT_S, Admission, Declined
from snakeddp.warm.channel import SAID_IMPORTED, Link, take
from snakeddp.warm.importing import Imports
from snakeddp.warm.loop import Server
from snakeddp.warm.preload import OPTIONAL
from snakeddp.warm.process import IMPORTED, PREFIX


class First(Server):
    """The first warm process: Snakemake's child, which owns the listening socket."""

    def __init__(
        self,
        listener: socket.socket,
        parent: int,
        handlers: dict[int, Any],
        imports: Imports,
        admission: Admission,
        home: str,
        second: Link | None,
    ) -> None:
        super().__init__(parent, handlers, imports)
        self.listener = listener
        self.admission = admission
        self.home = home  # the warm process's directory (mode 0700), which holds its socket
        self.second = second  # the second warm process, while it runs

    def listen(self) -> None:
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        if self.second is not None:
            self.selector.register(self.second.channel, selectors.EVENT_READ, "second")

    def handle(self, tag: str, events: int) -> None:
        if tag == "accept":
            self.accept()
        elif tag == "second":
            self.hear_second(events)

    def held(self) -> set[int]:
        return {self.listener.fileno(), *(self.second.fds() if self.second is not None else ())}

    def release(self) -> None:
        if self.second is not None:
            self.second.channel.close()
            self.second.drop_outbox()
        self.listener.close()

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            uid = handoff.peer_uid(conn)
            if uid != os.getuid():
                self.say(f"snakeddp: the warm process refused a connection from uid {uid}: it serves only its owner.")
                conn.close()
                return
            conn.settimeout(REQUEST_TIMEOUT_S)
            request, fds = handoff.receive(conn, max_fds=len(handoff.DESCRIPTORS))
            if request is None:
                raise Declined("the job sent no request")
            self.admission.check(request, fds)
        except (Declined, OSError, handoff.ProtocolError) as why:
            self.refuse(conn, fds, why)
            return
        if self.for_second(request):
            self.forward(conn, request, fds)
        else:
            self.take(conn, request, fds)

    def for_second(self, request: dict[str, Any]) -> bool:
        """Whether the second warm process forks the job: its step needs what that one imports."""
        return self.second is not None and self.imports.need(request) in self.second.modules

    def forward(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """Hand a checked job to the second warm process (which checks that it can fork when it does)."""
        assert self.second is not None
        self.second.forward(conn, request, fds)
        self.flush()

    def flush(self) -> None:
        """Send what the channel takes now; watch it for writing while anything is left to send."""
        second = self.second
        assert second is not None
        if not second.flush():
            self.second_gone()
            return
        writable = selectors.EVENT_WRITE if second.outbox else 0
        self.selector.modify(second.channel, selectors.EVENT_READ | writable, "second")

    def hear_second(self, events: int) -> None:
        """The channel is writable (send more), or readable: the second has imported all, or is gone."""
        if events & selectors.EVENT_WRITE:
            self.flush()
        if self.second is None or not events & selectors.EVENT_READ:
            return
        said = self.second.hear()
        if said is None:
            return
        if not said:
            self.second_gone()
        elif said == SAID_IMPORTED:
            self.second.imported = True
            self.say_imported()

    def second_gone(self) -> None:
        """The second warm process ended (killed, or stopping): reap it; what it had not taken yet is
        forked here, as if there were no second."""
        second, self.second = self.second, None
        assert second is not None
        self.selector.unregister(second.channel)
        second.channel.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(second.pid, 0)
        if not self.stopping:
            for forward in second.outbox:
                forward.conn.setblocking(True)
                self.start(forward.conn, forward.request, forward.fds)
            self.say_imported()  # all this process will import: whoever waits for the marker need wait no more

    def say_imported(self) -> None:
        """Everything is imported, here and in the second (or the second is gone): marked for whoever
        waits for it (snakeddp.warm.process.WarmProcess.imported)."""
        if not self.stopping and not self.imports.pending and (self.second is None or self.second.imported):
            open(os.path.join(self.home, IMPORTED), "w").close()

    def stop_taking(self) -> None:
        self.selector.unregister(self.listener)
        self.listener.close()
        # Its directory (snakeddp.warm.process made it): gone with the first, also when Snakemake was killed.
        if os.path.basename(self.home).startswith(PREFIX):
            shutil.rmtree(self.home, ignore_errors=True)

    def stop_second(self, late: float) -> bool:
        if self.second is None:
            return False
        self.second.stop(late)
        return True


class Second(Server):
    """The second warm process: the first's child, which serves the jobs the first forwards it."""

    def __init__(self, inbox: socket.socket, parent: int, handlers: dict[int, Any], imports: Imports) -> None:
        super().__init__(parent, handlers, imports)
        self.inbox = inbox  # the channel from the first

    def listen(self) -> None:
        self.selector.register(self.inbox, selectors.EVENT_READ, "inbox")

    def handle(self, tag: str, events: int) -> None:
        if tag == "inbox":
            self.take_forwarded()

    def held(self) -> set[int]:
        return {self.inbox.fileno()}

    def release(self) -> None:
        self.inbox.close()

    def take_forwarded(self) -> None:
        """A job from the first, or the first is gone."""
        job = take(self.inbox)
        if job is None:
            self.stop()
        self.take(*job)

    def say_imported(self) -> None:
        """Everything is imported: the second tells the first, which marks it once both are done."""
        if not self.stopping:
            with contextlib.suppress(OSError):
                self.inbox.send(SAID_IMPORTED)

    def stop_taking(self) -> None:
        self.selector.unregister(self.inbox)
        self.inbox.close()


def start_second(preload: list[str], listener: socket.socket, handlers: dict[int, Any], needs: dict[str, str]) -> Link:
    """Fork the second warm process before this one imports anything: it serves what it is sent over the
    channel, importing ``preload``."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    first = os.getpid()
    pid = os.fork()
    if pid == 0:
        listener.close()  # the first alone accepts the jobs
        ours.close()
        die_with(first)
        try:
            second = Second(theirs, first, handlers, Imports(preload, OPTIONAL, needs))
            second.serve()  # returns only by its stop's exit
        finally:
            os._exit(1)  # never on into the first's code
    theirs.close()
    ours.setblocking(False)
    return Link(pid, ours, frozenset(preload))


def die_with(parent: int) -> None:
    """SIGTERM (a graceful stop) when ``parent`` dies (Snakemake; the first warm process for the second);
    at once if it already has. Where the kernel cannot tell, the loop's parent check sees it within a second."""
    if not tie_to(parent, signal.SIGTERM):
        os._exit(0)
