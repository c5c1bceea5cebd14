"""The channel between the two warm processes, a socket pair made before the heavy one was forked: the
front one forwards it a checked job, the job's connection and descriptors with it (SCM_RIGHTS), and the
heavy one forks the job; all it ever says back is that it has imported everything. The channel's end
says either is gone. The front one never waits for the heavy one: its end is non-blocking, and what the
channel does not take now goes when it is writable."""

from __future__ import annotations

import os
import signal
import socket
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from snakeddp.util import handoff
from snakeddp.warm.jobs import drop, kill

#: All the heavy warm process ever says to the front one: it has imported everything. One byte, which
#: cannot arrive in pieces on the front one's non-blocking read; the channel's end says the heavy one is gone.
SAID_IMPORTED = b"i"


@dataclass
class Forward:
    """A job on its way to the heavy warm process: its connection and descriptors stay here until the
    whole request has gone (the channel takes what it can; the rest goes when it is writable)."""

    conn: socket.socket
    request: dict[str, Any]
    fds: list[int]
    unsent: bytes
    started: bool = False  # its descriptors went with the first bytes


@dataclass
class Link:
    """The front warm process's view of the heavy one: its pid, the channel jobs go over, what it imports."""

    pid: int
    channel: socket.socket  # non-blocking: the front one never waits for the heavy one
    modules: frozenset[str]
    imported: bool = False  # it said it has imported all of ``modules``
    outbox: deque[Forward] = field(default_factory=deque)
    terminated: bool = False  # stopping: asked to stop (SIGTERM)
    killed: bool = False  # stopping: its grace over (SIGKILL)

    def fds(self) -> set[int]:
        """The descriptors the front one holds for the heavy one: the channel, and the jobs not sent yet."""
        return {self.channel.fileno(), *(fd for forward in self.outbox for fd in (forward.conn.fileno(), *forward.fds))}

    def forward(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """Queue a checked job for the heavy one (which checks that it can fork when it does)."""
        self.outbox.append(Forward(conn, request, fds, handoff.frame({"request": request})))

    def flush(self) -> bool:
        """Send what the channel takes now; a job whose request has gone is the heavy one's. False:
        the heavy one is gone."""
        while self.outbox:
            forward = self.outbox[0]
            try:
                if forward.started:
                    sent = self.channel.send(forward.unsent)
                else:
                    sent = socket.send_fds(self.channel, [forward.unsent], [forward.conn.fileno(), *forward.fds])
                    forward.started = True
            except BlockingIOError:
                break
            except OSError:
                return False
            forward.unsent = forward.unsent[sent:]
            if forward.unsent:
                break
            self.outbox.popleft()
            drop(forward.conn, forward.fds)  # the heavy one holds its own copies
        return True

    def hear(self) -> bytes | None:
        """What the heavy one said (``SAID_IMPORTED``), b"" when it is gone, None when nothing came."""
        try:
            return self.channel.recv(1)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    def stop(self, late: float) -> None:
        """The front one is stopping, ``late`` seconds past its jobs' grace: SIGTERM at once (the heavy one
        stops its own jobs the same way), SIGKILL a second after the jobs' grace, when its grace is over too."""
        if not self.terminated:
            self.drop_outbox()
            kill(self.pid, signal.SIGTERM)
            self.terminated = True
        if late > 1.0 and not self.killed:  # its own grace is over too
            kill(self.pid, signal.SIGKILL)
            self.killed = True

    def drop_outbox(self) -> None:
        """Close the jobs not sent (stopping: they never run; in a forked job: not its own)."""
        for forward in self.outbox:
            drop(forward.conn, forward.fds)
        self.outbox.clear()


def take(inbox: socket.socket) -> tuple[socket.socket, dict[str, Any], list[int]] | None:
    """The heavy one's end: a job from the front one (its connection comes first, then the job's
    descriptors), or None: the front one is gone."""
    try:
        message, fds = handoff.receive(inbox, max_fds=1 + len(handoff.DESCRIPTORS))
    except (OSError, handoff.ProtocolError):
        message, fds = None, []
    if message is None or not fds:
        for fd in fds:
            os.close(fd)
        return None
    conn = socket.socket(fileno=fds[0])
    conn.setblocking(True)
    return conn, message["request"], fds[1:]
