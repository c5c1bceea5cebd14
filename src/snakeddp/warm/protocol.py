"""What a step's thin client and the workflow's warm process say to each other, over a unix socket.

The client sends one request (a length-prefixed JSON object) with its stdin, stdout, stderr and
working directory as file descriptors (SCM_RIGHTS). The warm process answers with one message:
``{"declined": WHY}`` (the client then runs the job itself, cold) or ``{"pid": PID}`` with the
forked job's pidfd, and, once the job has ended, ``{"status": WAITSTATUS}``.

Imported by every step before anything else, so it imports only what a bare interpreter has.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from typing import Any

#: The socket of the workflow's warm process, set in Snakemake's environment (so in every local job's).
SOCKET = "SNAKEDDP_WARM_SOCKET"
#: The only programs the warm process runs: the workflow's own steps (what the rules' commands name).
ENTRY_POINTS = ("snakeddp.steps", "snakeddp.launch", "snakeddp.cluster.supervisor")
#: A request is a command line and an environment: far below this, which bounds what the process reads.
MAX_MESSAGE = 4 * 1024 * 1024
#: The descriptors a request carries, in this order (the job's stdin, stdout, stderr and working directory).
DESCRIPTORS = ("stdin", "stdout", "stderr", "cwd")
_LENGTH = struct.Struct("!I")


class ProtocolError(Exception):
    """A message that is not one: too long, cut short, or not a JSON object."""


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()) -> None:
    data = json.dumps(message).encode()
    frame = _LENGTH.pack(len(data)) + data
    sent = socket.send_fds(sock, [frame], list(fds)) if fds else sock.send(frame)
    if sent < len(frame):
        sock.sendall(frame[sent:])


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) when the peer closed first."""
    if max_fds:
        head, fds, _, _ = socket.recv_fds(sock, _LENGTH.size, max_fds)
    else:
        head, fds = sock.recv(_LENGTH.size), []
    if not head:
        return None, fds
    head += _exactly(sock, _LENGTH.size - len(head))
    (length,) = _LENGTH.unpack(head)
    if length > MAX_MESSAGE:
        raise ProtocolError(f"a message of {length} bytes (at most {MAX_MESSAGE})")
    try:
        message = json.loads(_exactly(sock, length))
    except ValueError as error:
        raise ProtocolError(f"not JSON ({error})") from None
    if not isinstance(message, dict):
        raise ProtocolError("not a JSON object")
    return message, fds


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 16))
        if not chunk:
            raise ProtocolError("the message was cut short")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
