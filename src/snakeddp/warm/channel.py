"""The channel between the two warm processes, a socket pair made before the second was forked: the
first forwards it a checked job, the job's connection and descriptors with it (SCM_RIGHTS), and the
second forks the job; all the second ever says back is that it has imported everything. The channel's
end says either is gone. The first never waits for the second: its end is non-blocking, and what the
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

#: All the second warm process ever says to the first: it has imported everything. One byte, which
#: cannot arrive in pieces on the first's non-blocking read; the channel's end says the second is gone.
SAID_IMPORTED = b"i"


@dataclass
class Forward:
    """A job on its way to the second warm process: its connection and descriptors stay here until the
    whole request has gone (the channel takes what it can; the rest goes when it is writable)."""

    conn: socket.socket
    request: dict[str, Any]
    fds: list[int]
    unsent: bytes
    started: bool = False  # its descriptors went with the first bytes


@dataclass
class Link:
    """The first warm process's view of the second: its pid, the channel jobs go over, what it imports."""

    pid: int
    channel: socket.socket  # non-blocking: the first never waits for the second
    modules: frozenset[str]
    imported: bool = False  # it said it has imported all of ``modules``
    outbox: deque[Forward] = field(default_factory=deque)
    terminated: bool = False  # stopping: asked to stop (SIGTERM)
    killed: bool = False  # stopping: its grace over (SIGKILL)

    def fds(self) -> set[int]:
        """The descriptors the first holds for the second: the channel, and the jobs not sent yet."""
        return {self.channel.fileno(), *(fd for forward in self.outbox for fd in (forward.conn.fileno(), *forward.fds))}

    def forward(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """Queue a checked job for the second (which checks that it can fork when it does)."""
        self.outbox.append(Forward(conn, request, fds, handoff.frame({"request": request})))

    def flush(self) -> bool:
        """Send what the channel takes now; a job whose request has gone is the second's. False: the
        second is gone."""
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
            drop(forward.conn, forward.fds)  # the second holds its own copies
        return True

    def hear(self) -> bytes | None:
        """What the second said (``SAID_IMPORTED``), b"" when it is gone, None when nothing came."""
        try:
            return self.channel.recv(1)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    def stop(self, late: float) -> None:
        """The first is stopping, ``late`` seconds past its jobs' grace: SIGTERM at once (the second stops
        its own jobs the same way), SIGKILL a second after the jobs' grace, when the second's is over too."""
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
    """The second's end: a job from the first (its connection comes first, then the job's descriptors),
    or None: the first is gone."""
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
