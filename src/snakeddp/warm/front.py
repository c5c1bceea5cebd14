"""The front warm process: Snakemake's child, the one every job connects to.

It owns the socket: it checks every request (snakeddp.warm.admission), forks at once every job that
needs nothing the heavy warm process imports (snakeddp.warm.heavy), forwards the rest to it over their
channel (snakeddp.warm.channel), and marks in its directory when both have imported everything. It goes
away with Snakemake, and when the heavy one is gone it forks those jobs itself.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import socket
from typing import Any

from snakeddp.forking import helper
from snakeddp.util import handoff
from snakeddp.warm.admission import REQUEST_TIMEOUT_S, Admission, Declined
from snakeddp.warm.channel import SAID_IMPORTED, Link
from snakeddp.warm.importing import Imports
from snakeddp.warm.process import IMPORTED, PREFIX
from snakeddp.warm.server import Server


class Front(Server):
    """The front warm process: Snakemake's child, which owns the listening socket."""

    def __init__(
        self,
        listener: socket.socket,
        parent: int,
        handlers: dict[int, Any],
        imports: Imports,
        admission: Admission,
        home: str,
        heavy: Link | None,
    ) -> None:
        super().__init__(parent, handlers, imports)
        self.listener = listener
        self.admission = admission
        self.home = home  # the warm process's directory (mode 0700), which holds its socket
        self.heavy = heavy  # the heavy warm process, while it runs

    def listen(self) -> None:
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        if self.heavy is not None:
            self.selector.register(self.heavy.channel, selectors.EVENT_READ, "heavy")

    def handle(self, tag: str, events: int) -> None:
        if tag == "accept":
            self.accept()
        elif tag == "heavy":
            self.hear_heavy(events)

    def held(self) -> set[int]:
        return {self.listener.fileno(), *(self.heavy.fds() if self.heavy is not None else ())}

    def release(self) -> None:
        if self.heavy is not None:
            self.heavy.channel.close()
            self.heavy.drop_outbox()
        self.listener.close()

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            uid = helper.stranger(conn)
            if uid is not None:
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
        if self.for_heavy(request):
            self.forward(conn, request, fds)
        else:
            self.take(conn, request, fds)

    def for_heavy(self, request: dict[str, Any]) -> bool:
        """Whether the heavy warm process forks the job: its step needs what that one imports."""
        return self.heavy is not None and self.imports.need(request) in self.heavy.modules

    def forward(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """Hand a checked job to the heavy warm process (which checks that it can fork when it does)."""
        assert self.heavy is not None
        self.heavy.forward(conn, request, fds)
        self.flush()

    def flush(self) -> None:
        """Send what the channel takes now; watch it for writing while anything is left to send."""
        heavy = self.heavy
        assert heavy is not None
        if not heavy.flush():
            self.heavy_gone()
            return
        writable = selectors.EVENT_WRITE if heavy.outbox else 0
        self.selector.modify(heavy.channel, selectors.EVENT_READ | writable, "heavy")

    def hear_heavy(self, events: int) -> None:
        """The channel is writable (send more), or readable: the heavy one has imported all, or is gone."""
        if events & selectors.EVENT_WRITE:
            self.flush()
        if self.heavy is None or not events & selectors.EVENT_READ:
            return
        said = self.heavy.hear()
        if said is None:
            return
        if not said:
            self.heavy_gone()
        elif said == SAID_IMPORTED:
            self.heavy.imported = True
            self.say_imported()

    def heavy_gone(self) -> None:
        """The heavy warm process ended (killed, or stopping): reap it; what it had not taken yet is
        forked here, as if there were no heavy one."""
        heavy, self.heavy = self.heavy, None
        assert heavy is not None
        self.selector.unregister(heavy.channel)
        heavy.channel.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(heavy.pid, 0)
        if not self.stopping:
            for forward in heavy.outbox:
                forward.conn.setblocking(True)
                self.start(forward.conn, forward.request, forward.fds)
            self.say_imported()  # all this process will import: whoever waits for the marker need wait no more

    def say_imported(self) -> None:
        """Everything is imported, here and in the heavy one (or it is gone): marked for whoever
        waits for it (snakeddp.warm.process.WarmProcess.imported)."""
        if not self.stopping and not self.imports.pending and (self.heavy is None or self.heavy.imported):
            open(os.path.join(self.home, IMPORTED), "w", encoding="utf-8").close()

    def stop_taking(self) -> None:
        self.selector.unregister(self.listener)
        self.listener.close()
        # Its directory (snakeddp.warm.process made it): gone with this process, also when Snakemake was killed.
        if os.path.basename(self.home).startswith(PREFIX):
            shutil.rmtree(self.home, ignore_errors=True)

    def stop_heavy(self, late: float) -> bool:
        if self.heavy is None:
            return False
        self.heavy.stop(late)
        return True
