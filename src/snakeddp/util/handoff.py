"""A step's first lines, and what they say to the workflow's warm process (snakeddp.warm).

The rules' commands stay what they were (``python -m snakeddp.steps ...``, ``python -m
snakeddp.launch ...``): each of those modules, and snakeddp's supervisor, calls ``hand_off``
before its own imports. Where ``SNAKEDDP_WARM_SOCKET`` names a warm process, this interpreter
(tens of milliseconds old, nothing imported) sends what makes the job the job: its argv,
environment, working directory, umask, resource limits, stdin/stdout/stderr, interpreter and
import path. The warm process forks a child that becomes ``python -m MODULE ARGS`` with all of
them, and this process stays in its place: the signals it gets are passed on to the child (and
those Snakemake's process got alone, which it relays: snakeddp.util.relays), and it exits with the child's
status (killed by a signal: killed by the same one). If no warm process answers, or it declines
(it says why, once, on Snakemake's terminal), ``hand_off`` returns and the job runs here, cold, as
before, taking Snakemake's relays itself.

The wire: the client sends one request (a length-prefixed JSON object) with its stdin, stdout,
stderr and working directory as file descriptors (SCM_RIGHTS). The warm process answers
``{"declined": WHY}``; or the forked job itself, before it runs anything, sends ``{"pid": PID}`` with
its pidfd, and the warm process, once the job has ended, ``{"status": WAITSTATUS}``. A client that
hears neither runs the job cold: the job never began.

On the ground floor, beside the terminal relay's client (``snakeddp.util.terminal``): every step
imports it before anything else, so it imports only what a bare interpreter has.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import struct
import sys

from snakeddp.util import relays
from snakeddp.util.relays import RELAYED

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


def frame(message: dict[str, object]) -> bytes:
    """A message as it goes over the socket: its length, then its JSON."""
    data = json.dumps(message).encode()
    return _LENGTH.pack(len(data)) + data


def send(sock: socket.socket, message: dict[str, object], fds: list[int] | tuple[int, ...] = ()) -> None:
    data = frame(message)
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, object] | None, list[int]]:
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


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a unix socket: a server takes only its owner's."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


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


#: What a terminal, a user or a scheduler may send the job: each is passed on to the forked child, and so is a
#: closed terminal's SIGHUP unless this process began with it ignored (`nohup`: the child ignores it too, and it
#: stands for no stop; relays.with_hangup). SIGKILL cannot be caught: the warm process sees this connection close
#: and kills the child.
FORWARDED = (
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
)

#: Started by a job's launcher (snakeddp.launch), which passes every signal it gets on to it: Snakemake's relays
#: are for the job's top process, and would reach this one a second time.
LAUNCHED = ("snakeddp.cluster.supervisor",)

#: True in a forked job: running the step's module again as __main__ must not hand it off again.
served = False
#: The modules this process asked the warm process to run: one declined runs cold, and is not asked for twice.
_asked: set[str] = set()


def request(module: str) -> dict:
    """What this process would run as, in the words the warm process checks and applies."""
    umask = os.umask(0)
    os.umask(umask)
    limits = {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")}
    return {
        "module": module,
        "argv": sys.argv[1:],
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "umask": umask,
        "rlimits": limits,
        "executable": sys.executable,
        "flags": list(sys.flags),
        "path": sys.path[1:],  # [0] is the working directory, which `python -m` puts first
        "warnoptions": sys.warnoptions,
    }


def hand_off(module: str) -> None:
    """Run this job in a child of the warm process and exit as it exits; return to run it cold."""
    address = os.environ.get(SOCKET)
    if served or module in _asked:
        return
    _asked.add(module)
    takes_relays = module not in LAUNCHED
    if not address:
        if takes_relays:
            relays.take()
        return
    # Held from the request until the forwarders are in place (wait_for): the child may run, and the job be
    # signalled, before this process reads the answer; a Ctrl-C then raised here and left the child running.
    # A job declined or gone gets them as it runs cold.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, (*FORWARDED, signal.SIGHUP, *RELAYED))
    # Handled (held until wait_for) from now: Snakemake's process relays only to a process that handles them.
    if takes_relays:
        for relay in RELAYED:
            signal.signal(relay, _held)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
    except OSError as error:
        sock.close()
        _run_cold(mask, takes_relays)
        print(
            f"snakeddp: the workflow's warm process did not answer at {address} ({error.strerror}); "
            "this job starts cold.",
            file=sys.stderr,
            flush=True,
        )
        return
    stdio = [fd for fd in (0, 1, 2) if is_open(fd)]
    cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    message = {**request(module), "stdio": [fd in stdio for fd in (0, 1, 2)]}
    try:
        send(sock, message, [*stdio, cwd])
        answer, fds = receive(sock, max_fds=1)
    except (OSError, ProtocolError):
        answer, fds = None, []
    finally:
        os.close(cwd)
    if answer is None or "pid" not in answer or not fds:
        sock.close()
        for fd in fds:
            os.close(fd)
        _run_cold(mask, takes_relays)
        return  # declined (said on the workflow's terminal) or gone: the job runs here
    wait_for(sock, fds[0], mask, takes_relays)


def _held(signum: int, frame: object) -> None:
    """A relay's handler until wait_for (or relays.take) installs its own: never runs, the relays are blocked
    meanwhile."""


def _run_cold(mask: set[signal.Signals], takes_relays: bool) -> None:
    """Take the relays as a cold job does (one pending now acts as the job starts), or give them up (one pending
    is dropped) where Snakemake does not relay or they are not this process's; then take signals again as the job,
    which runs here."""
    if takes_relays:
        relays.take()
    for relay in RELAYED:
        if signal.getsignal(relay) is _held:
            signal.signal(relay, signal.SIG_IGN)  # discards one pending
            signal.signal(relay, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def hand_off_before_package(module: str) -> None:
    """``hand_off(module)`` from the ``__init__`` of ``module``'s package, where this process is ``python -m
    module``: that command imports the package (and all it imports) before the module's first line."""
    argv = sys.orig_argv
    if "-m" in argv and argv[argv.index("-m") + 1 :][:1] == [module]:
        hand_off(module)


def wait_for(sock: socket.socket, pidfd: int, mask: set[signal.Signals], takes_relays: bool) -> None:
    """Pass signals on to the child until it ends, then end the same way. Never returns. ``mask``: this
    process's signal mask before the forwarded signals were held; those that came meanwhile are passed on.
    ``takes_relays``: Snakemake's relays too (not a launcher's child's: its launcher passes them on)."""

    got: set[int] = set()

    def forward(signum: int, frame: object) -> None:
        got.add(relays.stop_for(signum))  # a hang-up: Snakemake's process relays it as SIGTERM
        try:
            signal.pidfd_send_signal(pidfd, signum)
        except ProcessLookupError:
            pass  # it has ended; its status is on the way

    def relayed(relay: int, frame: object) -> None:
        # Snakemake's process got the signal: passed on unless this process got it too (its process group's: a
        # terminal's Ctrl-C, or its hang-up, passed on as it came, which the job's step takes as SIGTERM).
        if RELAYED[relay] not in got:
            forward(RELAYED[relay], frame)

    for signum in relays.with_hangup(FORWARDED):
        signal.signal(signum, forward)
    for relay in RELAYED if takes_relays else ():
        signal.signal(relay, relayed)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:
        answer, _ = receive(sock)
    except (OSError, ProtocolError):
        answer = None
    if answer is None or not isinstance(answer.get("status"), int):
        # The warm process went away first (Snakemake was killed): it stopped the child on its way.
        print("snakeddp: the workflow's warm process ended before this job did.", file=sys.stderr, flush=True)
        exit_as(-signal.SIGKILL)  # as a waitstatus reads a killed process
    status = answer["status"]
    exit_as(os.waitstatus_to_exitcode(status))


def exit_as(code: int) -> None:
    """Exit with ``code`` as a waitstatus reads it: negative means killed by that signal."""
    if code >= 0:
        os._exit(code)
    signum = -code
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))  # the child dumped
    if signum not in (signal.SIGKILL, signal.SIGSTOP):  # neither has a handler to reset
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default is to go on (SIGCHLD, SIGWINCH): the shell's number
