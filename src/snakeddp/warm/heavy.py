"""The heavy warm process: forked from the front one before either imported anything, it imports what
takes seconds (torch, Lightning, the report's matplotlib: snakeddp.warm.preload.SLOW) and forks the jobs
the front one forwards it over their channel (snakeddp.warm.channel). It goes away with the front one.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
from typing import Any

from snakeddp.warm.channel import SAID_IMPORTED, Link, take
from snakeddp.warm.importing import Imports
from snakeddp.warm.preload import OPTIONAL
from snakeddp.warm.server import Server, die_with


class Heavy(Server):
    """The heavy warm process: the front one's child, which serves the jobs the front one forwards it."""

    def __init__(self, inbox: socket.socket, parent: int, handlers: dict[int, Any], imports: Imports) -> None:
        super().__init__(parent, handlers, imports)
        self.inbox = inbox  # the channel from the front warm process

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
        """A job from the front warm process, or it is gone."""
        job = take(self.inbox)
        if job is None:
            self.stop()
        self.take(*job)

    def say_imported(self) -> None:
        """Everything is imported: tell the front warm process, which marks it once both are done."""
        if not self.stopping:
            with contextlib.suppress(OSError):
                self.inbox.send(SAID_IMPORTED)

    def stop_taking(self) -> None:
        self.selector.unregister(self.inbox)
        self.inbox.close()


def start_heavy(preload: list[str], listener: socket.socket, handlers: dict[int, Any], needs: dict[str, str]) -> Link:
    """Fork the heavy warm process before this one imports anything: it serves what it is sent over the
    channel, importing ``preload``."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    front = os.getpid()
    pid = os.fork()
    if pid == 0:
        listener.close()  # the front one alone accepts the jobs
        ours.close()
        die_with(front)
        try:
            heavy = Heavy(theirs, front, handlers, Imports(preload, OPTIONAL, needs))
            heavy.serve()  # returns only by its stop's exit
        finally:
            os._exit(1)  # never on into the front one's code
    theirs.close()
    ours.setblocking(False)
    return Link(pid, ours, frozenset(preload))
