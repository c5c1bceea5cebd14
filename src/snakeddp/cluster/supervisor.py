"""Start a run's processes on this machine and look after them: ``python -m snakeddp.cluster.supervisor``.

    python -m snakeddp.cluster.supervisor --nproc-per-node=2 -- python -m snakeddp.train ARGS

The local profile's launcher (``direct``). Each process gets torchrun's variables (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) and rank 0
hosts the rendezvous, as under torchrun. What torchrun's agent does for one node without
restarts, this does too: the first process that fails stops the others (SIGTERM, then SIGKILL
after ``--stop-timeout``; not when it exits preempted after a signal every process got),
signals are passed on to every process, and its exit code is the first failure's. A rank that
found the run hung (snakeddp.training.watch: it exits HUNG_EXIT_CODE, having said which rank the
others wait for) has the rest killed at once: they are stuck, and none could save. Started cold,
each rank is a process of its own that imports torch and Lightning itself; with ``--fork-ranks``
(what ``snakeddp.launch`` passes unless SNAKEDDP_WARM_START=0) the supervisor imports the ranks'
module once and forks every rank from itself (``snakeddp.cluster.warm``), or says in one line why
it could not and starts them cold. What it imports is the ranks' only: its own work needs no
torch, for which torchrun's agent spent 1.6-1.9 s here before any rank started (bench/results.md, 8.).
"""

from __future__ import annotations

if __name__ == "__main__":  # a job of the workflow: its warm process runs it, where there is one
    from snakeddp.util.handoff import hand_off

    hand_off(__spec__.name)

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence

from snakeddp.cluster.direct import LAUNCH_ID
from snakeddp.cluster.direct import SUPERVISOR as PROG
from snakeddp.cluster.lifecycle import FORWARDED, HUNG_EXIT_CODE, PREEMPTED_EXIT_CODE, die_with_parent
from snakeddp.cluster.warm import RANK_START, WARM_START, NotForkable, Warm
from snakeddp.errors import quiet_interrupts
from snakeddp.util import threads

STOP_TIMEOUT_S = 30.0  # torchrun's agent waits as long before it kills its workers


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {PROG}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc-per-node", type=int, required=True)
    parser.add_argument("--master-port", type=int, help="rank 0's rendezvous port (default: a free one)")
    parser.add_argument("--stop-timeout", type=float, default=STOP_TIMEOUT_S, help="seconds before SIGKILL")
    parser.add_argument(
        "--fork-ranks",
        action="store_true",
        help="import a `python -m MODULE` command's module once and fork every rank from this process",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command every process runs")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command or args.nproc_per_node < 1:
        parser.error("needs --nproc-per-node >= 1 and a command after --")
    return args


def reserve_port() -> socket.socket:
    """A free port for rank 0's store, held by this process (bound, not listening) while the ranks run.

    A port that is found free and let go stays free for anyone until rank 0 listens on it,
    seconds of imports later. Held with SO_REUSEADDR, the OS skips it when anyone else asks for a
    free or an outgoing port, while rank 0's store, which sets SO_REUSEADDR too, can listen on it.
    (torchrun's agent avoids the same gap by sharing its own store with the ranks.)
    """
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(("", 0))  # every address: rank 0's store listens on all of them
    return held


def rank_environments(nproc: int, port: int, env: dict[str, str]) -> list[dict[str, str]]:
    shared = {
        **env,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0",
        "NODE_RANK": "0",
        LAUNCH_ID: uuid.uuid4().hex,
    }
    return [{**shared, "RANK": str(rank), "LOCAL_RANK": str(rank)} for rank in range(nproc)]


def exit_status(returncode: int) -> int:
    """A shell's exit code for a child: 128 + N for one killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    """The processes of one start, and the rule that one failure stops them all.

    Processes are reaped here alone (``os.waitpid``) and signalled by pid while alive: Popen's own
    poll() would reap one behind this loop's back and lose its exit status.
    """

    def __init__(self, command: list[str], environments: list[dict[str, str]], stop_timeout: float) -> None:
        self.command, self.environments, self.stop_timeout = command, environments, stop_timeout
        self.alive: dict[int, int] = {}  # pid -> rank
        self.processes: dict[int, subprocess.Popen] = {}  # the cold ones'
        self.warm: Warm | None = None  # forks the ranks while it can
        self.own: list[socket.socket] = []  # what this process holds and no rank may
        self.pending: list[int] | None = []  # signals that came before every process existed
        self.forwarded: set[int] = set()  # the signals passed on to every process
        self.lock = threading.RLock()  # the kill timer signals from another thread

    def signal(self, signum: int, pids: list[int] | None = None) -> None:
        with self.lock:
            for pid in self.alive if pids is None else pids:
                if pid in self.alive:
                    try:
                        os.kill(pid, signum)
                    except ProcessLookupError:
                        pass

    def forward(self, signum: int, frame: object = None) -> None:
        self.forwarded.add(signum)
        if self.pending is not None:  # still starting: every process gets it once they all exist
            self.pending.append(signum)
        else:
            self.signal(signum)

    def start(self) -> None:
        for rank, environment in enumerate(self.environments):
            pid = self.fork(environment)
            if pid is None:
                # Its own session, as torchrun's agent does: a terminal's Ctrl-C (or a kill of this
                # process group) reaches the ranks once, passed on by this process, not also directly.
                # Tied to this process from before exec: a rank sets that itself only after its
                # imports, seconds in which a killed supervisor would have left it orphaned.
                process = subprocess.Popen(
                    self.command,
                    env={**environment, RANK_START: "cold"},
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                )
                pid, self.processes[process.pid] = process.pid, process
            self.alive[pid] = rank
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        pending, self.pending = self.pending or [], None
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        for signum in dict.fromkeys(pending):
            self.signal(signum)

    def fork(self, environment: dict[str, str]) -> int | None:
        """A rank forked from the warm process; None (said once) when it cannot be."""
        if self.warm is None:
            return None
        try:
            return self.warm.fork(environment, self.own)
        except NotForkable as why:
            self.warm = None
            cold(why, len(self.environments) - len(self.alive))
            return None

    def wait(self) -> int:
        """Wait for every process; stop the rest at the first failure. The first failure's code, else 0."""
        failure: int | None = None
        while self.alive:
            pid, status = os.waitpid(-1, 0)
            with self.lock:
                rank = self.alive.pop(pid, None)
            if rank is None:
                continue
            returncode = os.waitstatus_to_exitcode(status)
            if pid in self.processes:  # reaped here: its Popen must not look for it again
                self.processes[pid].returncode = returncode
            code = exit_status(returncode)
            if code != 0 and failure is None:
                failure = code
                if code == HUNG_EXIT_CODE:
                    # A rank found the run hung (it said so in one line): the others are stuck in a collective
                    # or stopped, and none can save. Nothing to wait for.
                    self.signal(signal.SIGKILL, list(self.alive))
                    continue
                # A rank that stopped on a passed-on signal: the others got it too, and are saving.
                if self.alive and not (self.forwarded and code == PREEMPTED_EXIT_CODE):
                    if not self.forwarded:  # after Ctrl-C or a kill, the exits are no news
                        print(ended_line(rank, pid, returncode, len(self.alive)), file=sys.stderr, flush=True)
                    # A rank that died of a signal passed on to all: the others have it already, and a
                    # second SIGTERM would reach them twice; only the SIGKILL backstop is still due.
                    self.stop(list(self.alive), terminate=code - 128 not in self.forwarded)
        return failure or 0

    def stop(self, survivors: list[int], terminate: bool = True) -> None:
        """SIGTERM now (a rank saves last.ckpt and exits) unless ``terminate`` is false, SIGKILL for any
        still there after the timeout."""
        if terminate:
            self.signal(signal.SIGTERM, survivors)
        timer = threading.Timer(self.stop_timeout, self.signal, args=(signal.SIGKILL, survivors))
        timer.daemon = True
        threads.start(timer)  # a second Ctrl-C it took would wait for the main thread's os.waitpid to return


def ended_line(rank: int, pid: int, returncode: int, alive: int) -> str:
    """What the supervisor says of the first rank to end in failure: its code, or the signal that killed it (a rank
    that raised said why itself; a killed one could not)."""
    stopping = f"stopping the other {alive} process(es)"
    if returncode >= 0:
        return f"{PROG}: rank {rank} (pid {pid}) exited with {returncode}; {stopping}"
    name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else f"signal {-returncode}"
    why = " (the kernel's out-of-memory killer, or a kill -9: `dmesg` says which)" if name == "SIGKILL" else ""
    return (
        f"{PROG}: rank {rank} (pid {pid}) was killed by {name}{why}; {stopping}. HINT: rerun the same command: the "
        "run resumes from its last checkpoint (from epoch 1 where it has none)."
    )


def cold(why: NotForkable, ranks: int) -> None:
    print(
        f"{PROG}: starting {ranks} rank(s) cold, each importing on its own: {why}. HINT: the run trains the "
        f"same, only its start is slower; export {WARM_START}=0 to start ranks cold without this line.",
        file=sys.stderr,
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    die_with_parent()  # a killed launcher takes this process, and through it every rank, along
    warm = None
    if args.fork_ranks:
        try:
            warm = Warm(args.command)  # before this process's own handlers: it keeps a fresh interpreter's
        except NotForkable as why:
            cold(why, args.nproc_per_node)
    held = reserve_port() if args.master_port is None else None
    port = held.getsockname()[1] if held is not None else args.master_port
    supervisor = Supervisor(
        args.command, rank_environments(args.nproc_per_node, port, dict(os.environ)), args.stop_timeout
    )
    for signum in FORWARDED:
        signal.signal(signum, supervisor.forward)
    if warm is not None:
        if held is not None:
            warm.own(held.fileno())
            supervisor.own.append(held)
        try:
            warm.preload()
            supervisor.warm = warm
        except NotForkable as why:
            cold(why, args.nproc_per_node)
    supervisor.start()
    try:
        return supervisor.wait()
    finally:
        if held is not None:
            held.close()


if __name__ == "__main__":
    # A Ctrl-C before the ranks' handlers are set (the whole process group gets it) ends this process as
    # Python ends it, without the traceback of wherever it landed (argparse, the warm process's preload).
    sys.excepthook = quiet_interrupts(sys.excepthook)
    raise SystemExit(main())
