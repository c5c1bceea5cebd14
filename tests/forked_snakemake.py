"""The harness's `python -m snakemake` (tests.helpers.Workflow.run), forked from a process that imported
Snakemake once, per venv and pytest worker, instead of started cold each time.

Two thirds of a dry run's CPU is Snakemake's own imports (1.2 of 1.7 s here: its scheduler imports every
executor plugin, and the Slurm plugin imports pandas), and the harness starts Snakemake some 300 times a
run. What a user types (`snakemake --profile ...` in a checkout, tests.checkout) still starts cold, and so
do a run the test wraps in a command of its own (any but tests.gpu_standin's) and one whose import path puts
another version's snakeddp first (tests/e2e/test_upgrade.py). Each venv and set of interpreter settings
(PYTHON*, LD_*) has a server of its own. A forked run is the one a cold start makes, by the product's own
forking layer (snakeddp.forking: a session of its own, a fresh interpreter's signal handlers, the environment
and argv exactly, ``-m snakemake`` as ``__main__``, atexit and the exit status) and the warm process's placing
of a job (snakeddp.warm.jobs: stdio, working directory, ``sys.path[0]``, umask); only the string hash seed is
the server's, the same in every run.

A run wrapped in a stand-in GPU machine's command (tests.gpu_standin.MachineCommand) is forked too, and
reproduces the wrap: placed, it enters the machine's mount namespace by the code the wrapping command runs
before its exec (standin_machine.enter_mounts, from the same arguments: ``mounts``), so it sees the machine's
/proc/driver, /dev and torch version.py as the cold run does. Its server has the stand-in's interpreter
settings (its sitecustomize first on PYTHONPATH, its NVML on LD_LIBRARY_PATH), as the cold run's interpreter
does, and imported nothing the mounts cover (torch: each run imports it under the machine's version.py).

Run as a script by the venv's interpreter (``python tests/forked_snakemake.py --fd N --parent PID``), it is
the server: it imports what ``python -m snakemake`` imports, then for each request forks a keeper that forks
the run, says the run's pid, waits for it (killing it if the test is gone) and says its status and CPU. The
server itself never waits for a run (it reaps its keepers as they end), so it takes the next request at once.
Imported by the tests, it is the client: ``run`` returns what ``subprocess.run(..., capture_output=True,
text=True)`` would have, or None where the run should start cold.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib.util
import os
import random
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: A fresh interpreter's handling of these, which each run gets back (the server and keeper change none).
RESET_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGCHLD)
#: What a run imports after the command line is read: Snakemake's profile, storage and report parts, and what
#: the Snakefile imports.
LATER_IMPORTS = (
    "snakemake.profiles", "platformdirs", "argparse_dataclass", "snakemake.report.html_reporter", "snakemake.storage",
    "smart_open", "packaging.version", "graphlib", "pynvml", "snakeddp.workflow.preflight", "snakeddp.workflow.plan",
)  # fmt: skip
#: This checkout's package: the one whose forking layer the server uses.
CHECKOUT_SRC = Path(__file__).resolve().parents[1] / "src"
#: What a stand-in GPU machine's command runs to enter its mount namespace (tests.gpu_standin), a forked run too.
STANDIN_MACHINE = Path(__file__).with_name("gpu_standin") / "standin_machine.py"
#: The server's first line once it takes runs.
READY = "ready"
#: The one native thread Snakemake's imports start (pyarrow's jemalloc, through pandas): jemalloc's own fork
#: handlers make a fork safe with it, and its child starts it again when it needs one.
FORK_SAFE_THREADS = {"jemalloc_bg_thd"}


# The server's side, in the venv's interpreter.


def serve(listener: socket.socket, parent: int) -> None:
    from snakeddp.forking.helper import tie_to_parent
    from snakeddp.forking.safety import native_threads
    from snakeddp.util.shutdown import freeze_imports, pause_collection

    handlers = {signum: signal.getsignal(signum) for signum in RESET_SIGNALS}
    if not tie_to_parent(parent):
        return
    pause_collection()
    import snakemake.cli  # noqa: F401  what `python -m snakemake` imports first, its plugins and pandas with it

    for name in LATER_IMPORTS:
        importlib.import_module(name)

    freeze_imports()
    stray = set(native_threads()) - FORK_SAFE_THREADS
    if stray:
        sys.exit(f"importing snakemake started threads {sorted(stray)}: a fork would not copy them")
    signal.signal(signal.SIGCHLD, reap)
    print(READY, flush=True)
    while True:
        conn, _ = listener.accept()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # until the keeper has its own handling
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the keeper waits for its run
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
            code = 1
            try:
                code = keep(conn, handlers)
            finally:
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        conn.close()


def reap(signum: int, frame: object) -> None:
    """Wait for the keepers that ended: their CPU, and their runs', then counts as the server's children's, as a
    cold run's counts as its test's (a child the kernel reaps, with SIGCHLD ignored, adds none)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def keep(conn: socket.socket, handlers: dict) -> int:
    """The keeper of one run: fork it, say its pid, wait for it, say its status and CPU."""
    from snakeddp.forking import child
    from snakeddp.forking.helper import stranger
    from snakeddp.util import handoff

    child.die_with_parent()  # the server stopped: so is every run it started
    if stranger(conn) is not None:
        return 1
    request, fds = handoff.receive(conn, max_fds=len(handoff.DESCRIPTORS))
    if request is None:
        return 1
    pid = child.fork(lambda keeper: become_run(keeper, conn, request, fds, handlers), blocked=())
    for fd in fds:
        os.close(fd)
    handoff.send(conn, {"pid": pid})
    pidfd = os.pidfd_open(pid)
    with selectors.DefaultSelector() as selector:
        selector.register(conn, selectors.EVENT_READ)
        selector.register(pidfd, selectors.EVENT_READ)
        if any(key.fileobj is conn for key, _ in selector.select()):  # the test is gone (killed, timed out)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    handoff.send(conn, {"status": status, "cpu_s": usage.ru_utime + usage.ru_stime})
    return 0


def become_run(keeper: int, conn: socket.socket, request: dict, fds: list[int], handlers: dict) -> int:
    """The forked run: a session of its own, the request's stdio, directory and umask, the stand-in machine its
    ``mounts`` name (if any), then ``python -m snakemake ARGS`` with the request's environment."""
    from snakeddp.forking import child
    from snakeddp.warm import jobs

    child.detach(keeper, handlers, blocked=())
    conn.close()
    jobs.place(request, fds)
    if request["mounts"] is not None:
        enter_standin(request["mounts"])
    random.seed()  # seeded from the OS at import, as numpy is (child.become seeds that one again)
    return child.become(request["argv"], request["env"])


def enter_standin(mounts: list[str]) -> None:
    """The stand-in machine's mount namespace, entered as its wrapping command enters it before its exec."""
    spec = importlib.util.spec_from_file_location("standin_machine", STANDIN_MACHINE)
    machine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(machine)  # kept out of sys.modules: a cold run never imports it
    covered = {mounts[3], os.path.realpath(mounts[3])}
    imported = [name for name, module in sys.modules.items() if getattr(module, "__file__", None) in covered]
    if imported:  # the host's copy would stay what the run sees
        raise RuntimeError(f"the server imported {imported}, which the stand-in machine covers")
    cached = tempfile.tempdir
    machine.enter_mounts(mounts)
    tempfile.tempdir = cached  # what its staging found from the server's environment: the run finds its own


def main() -> None:
    sys.path[0] = os.getcwd()  # not tests/ (its modules are not Snakemake's); each run puts its own directory there
    import snakeddp

    if Path(snakeddp.__file__).resolve().parents[1] != CHECKOUT_SRC:  # another version's (tests/e2e/test_upgrade.py)
        sys.exit(f"snakeddp here is {snakeddp.__file__}, not this checkout's: its runs start cold")
    from snakeddp.forking import helper  # the --fd and --parent of every helper process of snakeddp's

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    helper.add_arguments(parser)
    args = parser.parse_args()
    serve(helper.listener(args), args.parent)


# The tests' side.

#: The interpreter settings a process takes from its environment at its start: one server for each.
STARTUP_VARIABLES = ("PYTHON", "LD_", "LANG", "LC_")
#: The server's environment is those and no more (a run gets its own whole): /proc/PID/environ is the one a
#: process was started with, and a server started with a test's cluster variables would pass for the cluster's
#: (tests/slurm/cluster.py stops what outlives it). One OpenMP and BLAS thread: its imports start no pool.
SERVER_ENVIRONMENT = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
#: What a server's stop may take before SIGKILL (it holds no run by then).
STOP_TIMEOUT_S = 30.0
#: Set to 1, every run starts cold (to compare the two).
COLD = "SNAKEDDP_TESTS_COLD_SNAKEMAKE"
#: CPU of the forked runs so far (the server's children, not this process's): tests/conftest.py counts it.
forked_cpu_s = [0.0]
#: Held to start a server and to count a run's CPU: a test may run several at once from threads.
_lock = threading.Lock()


class Server:
    """The server for one venv's interpreter and its startup variables, started on first use and stopped when
    this process exits."""

    def __init__(self, python: Path, startup: frozenset) -> None:
        self.directory = tempfile.mkdtemp(prefix="forked-snakemake-")  # 0700
        self.address = os.path.join(self.directory, "socket")
        env = {**dict(startup), **SERVER_ENVIRONMENT, "PATH": os.defpath}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(self.address)
            listener.listen(64)
            self.process = subprocess.Popen(
                [str(python), __file__, f"--fd={listener.fileno()}", f"--parent={os.getpid()}"],
                cwd=self.directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                pass_fds=[listener.fileno()],
                start_new_session=True,
            )
        atexit.register(self.stop)
        # Its imports done, or its reason on stderr and its runs cold.
        self.ready = self.process.stdout.readline().decode().strip() == READY

    def stop(self) -> None:
        from snakeddp.util import subprocesses

        subprocesses.stop(self.process, STOP_TIMEOUT_S)
        self.process.stdout.close()
        atexit.unregister(self.stop)
        shutil.rmtree(self.directory, ignore_errors=True)


_servers: dict[tuple[Path, frozenset], Server] = {}


def startup(env: dict[str, str]) -> frozenset:
    return frozenset((k, v) for k, v in env.items() if k.startswith(STARTUP_VARIABLES))


def run(
    command: list[str], cwd: Path, env: dict[str, str], timeout: float, mounts: list[str] | None = None
) -> subprocess.CompletedProcess | None:
    """``command`` (``PYTHON -m snakemake ARGS``) forked from its venv's server, as ``subprocess.run`` with
    ``capture_output=True, text=True`` runs it; None where it should start cold. ``mounts``: a stand-in GPU
    machine's (tests.gpu_standin.MachineCommand), which the run enters as the command wrapped in it would."""
    python = Path(command[0])
    if command[1:3] != ["-m", "snakemake"] or os.environ.get(COLD) == "1":
        return None
    key = (python, startup(env))
    with _lock:
        if key not in _servers:
            _servers[key] = Server(*key)
        server = _servers[key]
    if not server.ready:
        return None
    if server.process.poll() is not None:
        raise RuntimeError(f"the forked snakemake server of {python} exited ({server.process.returncode})")
    from snakeddp.util import handoff

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    stdin = os.open(os.devnull, os.O_RDONLY)
    directory = os.open(cwd, os.O_RDONLY | os.O_DIRECTORY)
    umask = os.umask(0)
    os.umask(umask)
    request = {"argv": command, "env": env, "stdio": [True, True, True], "umask": umask, "rlimits": {}}
    request["mounts"] = None if mounts is None else list(mounts)
    try:
        sock.connect(server.address)
        handoff.send(sock, request, [stdin, out_w, err_w, directory])
    finally:
        for fd in (stdin, out_w, err_w, directory):
            os.close(fd)
    answer, _ = handoff.receive(sock)
    if answer is None:
        raise RuntimeError(f"the forked snakemake server of {python} did not answer")
    output, status = _collect(sock, {out_r: bytearray(), err_r: bytearray()}, answer["pid"], command, timeout)
    stdout, stderr = (_text(output[fd]) for fd in (out_r, err_r))
    with _lock:
        forked_cpu_s[0] += status["cpu_s"]
    return subprocess.CompletedProcess(command, os.waitstatus_to_exitcode(status["status"]), stdout, stderr)


def _collect(sock: socket.socket, output: dict[int, bytearray], pid: int, command: list[str], timeout: float):
    """Read the run's output until both pipes close and its status comes; kill it at ``timeout``."""
    from snakeddp.util import handoff

    deadline = time.monotonic() + timeout
    status = None
    try:
        with selectors.DefaultSelector() as selector:
            for fd in output:
                selector.register(fd, selectors.EVENT_READ)
            selector.register(sock, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(command, timeout, bytes(output[min(output)]))
                for key, _ in selector.select(left):
                    if key.fileobj is sock:
                        selector.unregister(sock)
                        status, _ = handoff.receive(sock)
                        continue
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        output[key.fd] += chunk
                    else:
                        selector.unregister(key.fd)
    finally:  # also at the timeout: the connection's close tells the keeper, which kills the run too
        sock.close()
        for fd in output:
            os.close(fd)
    if status is None:
        raise RuntimeError(f"the forked snakemake server of {command[0]} ended before the run did")
    return output, status


def _text(data: bytearray) -> str:
    """As ``subprocess.run(text=True)`` decodes: the locale's encoding and universal newlines."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    main()
