"""The workflow's warm process (snakeddp.warm) with real clients: a forked job is what a fresh
`python -m MODULE` would be, ends as it would, gets its signals once, and only the warm process's
owner can make it fork, and only the programs it was started to run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bench.harness import REPO
from snakeddp.run import rules as workflow_rules
from snakeddp.util import handoff, relays
from snakeddp.warm import preload
from snakeddp.warm.process import WarmProcess
from snakeddp.workflow import interrupt
from tests.helpers import all_gone, subprocess_env

PROBE = "tests.warm.probe"


@contextlib.contextmanager
def stops_as_typed() -> Iterator[None]:
    """SIGINT's and SIGHUP's defaults in the processes started meanwhile, as a terminal's shell starts them. The
    warm process gives its jobs the handlers it began with (a cold job's): under nohup, a script's `&` or a CI
    runner this run inherits SIGINT (or SIGHUP) ignored, and the jobs the Ctrl-C (and hang-up) tests fork would
    ignore it too. A handled signal is reset to its default by exec, an ignored one stays ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGHUP, previous[1])


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory):
    """One warm process for the file's tests, started as the Snakefile starts it (its stderr kept). Its
    probe jobs need what a train job's supervisor needs: the heavy warm process forks them, as it forks
    the supervisors (the first forks them in the tests that start their own)."""
    log = tmp_path_factory.mktemp("warm") / "stderr"
    with open(log, "wb") as stderr, stops_as_typed():
        process = WarmProcess(
            entries=(*handoff.ENTRY_POINTS, PROBE), stderr=stderr.fileno(), needs={PROBE: "snakeddp.train"}
        )
        path = process.start(env(None))
    process.log = log
    process.path = path
    yield process
    process.close()
    assert not Path(path).parent.exists()


def env(warm: WarmProcess | None, **extra: str) -> dict[str, str]:
    """The jobs' environment (and the warm process's): the probe importable from any directory."""
    environment = subprocess_env(PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'src'}", **extra)
    environment.pop(handoff.SOCKET, None)
    if warm is not None:
        environment[handoff.SOCKET] = warm.path
    return environment


def probe(warm: WarmProcess | None, *args: str, cwd: Path = REPO, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", PROBE, *args], cwd=cwd, env=kwargs.pop("env", None) or env(warm), capture_output=True,
        text=True, timeout=120, check=False, **kwargs,
    )  # fmt: skip


def served_with_torch(warm: WarmProcess) -> bool:
    """Whether a probe job, forked from ``warm``, began with torch imported."""
    done = probe(warm, "imported")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["served"] is True, seen
    return seen["torch"]


def test_a_forked_job_sees_what_a_fresh_process_sees(warm, tmp_path):
    """argv, environment, working directory, umask, limits, stdin/stdout/stderr, open descriptors,
    signal handlers and torch's thread pool: the same warm and cold; only who ran it differs."""
    seen = {}
    observe = f"umask 027; ulimit -n 512; exec {sys.executable} -m {PROBE} observe 'an arg' > out.json"
    for name, server in (("warm", warm), ("cold", None)):
        with stops_as_typed():  # as the warm process began: its jobs get the handlers it began with
            done = subprocess.run(
                ["bash", "-c", observe],
                cwd=tmp_path, env=env(server, OMP_NUM_THREADS="2", MKL_NUM_THREADS="2"),
                input="the job's stdin", capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
        assert done.returncode == 0, done.stderr
        seen[name] = json.loads((tmp_path / "out.json").read_text())
    warm_seen, cold_seen = seen["warm"], seen["cold"]
    assert (warm_seen.pop("served"), cold_seen.pop("served")) == (True, False)
    assert warm_seen["env"].pop(handoff.SOCKET) == warm.path
    assert warm_seen == cold_seen
    assert warm_seen["argv"] == ["observe", "an arg"] and warm_seen["umask"] == 0o027
    assert warm_seen["nofile"][0] == 512 and warm_seen["stdin"] == "the job's stdin"
    assert warm_seen["cwd"] == str(tmp_path) and warm_seen["fds"] == [0, 1, 2, 3]  # 3: listdir's own
    assert warm_seen["name"] == "__main__" and warm_seen["torch_threads"] == 2
    # PYTHONUNBUFFERED (the tests' processes have it): write-through instead of line buffering.
    assert (warm_seen["stdout_line_buffered"], warm_seen["stderr_line_buffered"]) == (False, False)


def second_of(process: WarmProcess) -> psutil.Process:
    """The heavy warm process: the front one's child that is not a job (it runs no probe)."""
    (second,) = (child for child in psutil.Process(process.process.pid).children() if PROBE not in child.cmdline())
    return second


def slow_second(tmp_path: Path) -> WarmProcess:
    """A warm process whose second spends a minute importing (tests.warm.slow_import), once that import
    has begun; its stderr goes to tmp_path/stderr."""
    began = tmp_path / "began"
    with open(tmp_path / "stderr", "wb") as stderr:
        process = WarmProcess(
            entries=(*handoff.ENTRY_POINTS, PROBE), stderr=stderr.fileno(), slow=("tests.warm.slow_import",)
        )
        process.path = process.start(env(None, SLOW_IMPORT=str(began)), preload=("tests.warm.slow_import",))
    deadline = time.monotonic() + 60
    while not began.exists():
        assert process.process.poll() is None and time.monotonic() < deadline, "the import never began"
        time.sleep(0.05)
    return process


def test_jobs_that_do_not_need_the_slow_imports_never_wait_for_them(tmp_path):
    """What takes seconds to import (torch, Lightning) the heavy warm process imports: a job that does not
    need it is forked by the first at once, even while that import is still running (here, a minute
    long); a stop during it ends both processes at once."""
    process = slow_second(tmp_path)
    try:
        second = second_of(process)
        start = time.monotonic()
        assert served_with_torch(process) is False
        assert time.monotonic() - start < 30  # the import it did not need lasts 60 s
        assert not process.imported(timeout=0)
    finally:
        server = process.process
        process.close()
    assert server.returncode == 0  # its own stop, not close()'s SIGKILL
    assert all_gone([second.pid], within=5)
    assert (tmp_path / "stderr").read_text() == ""  # nothing declined, nothing said


def test_a_second_warm_process_killed_in_its_import_leaves_the_first_done_importing(tmp_path):
    """Whoever waits for the warm process's imports (benchmarks, tests) is not left waiting when the
    second dies before it has imported all: the first then imports no more, and says so."""
    process = slow_second(tmp_path)
    try:
        assert not process.imported(timeout=0)
        second_of(process).kill()
        assert process.imported(timeout=30)  # the import it was in lasts 60 s
        assert served_with_torch(process) is False  # and the first forks the jobs
    finally:
        process.close()


def test_a_job_for_a_second_warm_process_that_was_killed_is_forked_by_the_first(tmp_path):
    """The heavy warm process killed (SIGKILL): the front one reaps it and forks its jobs itself, which
    import what they need as a fresh process would."""
    process = WarmProcess(entries=(*handoff.ENTRY_POINTS, PROBE), needs={PROBE: "snakeddp.train"})
    process.path = process.start(env(None))
    try:
        assert served_with_torch(process) is True  # the second's, once it has imported torch
        second = second_of(process)
        second.kill()
        # Reaped by the first (a zombie would still be there). A job sent in the moment before the first saw
        # the second's end goes with it: its client finds no answer and runs it cold, as it would any job.
        deadline = time.monotonic() + 10
        while psutil.pid_exists(second.pid):
            assert time.monotonic() < deadline, "the first never reaped the second"
            time.sleep(0.05)
        assert served_with_torch(process) is False  # the first's (served: not cold)
    finally:
        process.close()


def connected(process: subprocess.Popen) -> bool:
    """Whether ``process`` holds a Unix socket: a probe job's connection to the warm process (a client's end of one
    names no path)."""
    try:
        return bool(psutil.Process(process.pid).net_connections(kind="unix"))
    except psutil.Error:  # ended meanwhile
        return False


def test_a_job_that_would_import_torch_waits_for_the_warm_process_to_import_it(tmp_path):
    """A job whose step imports what the warm process is importing (a train job's supervisor imports
    snakeddp.train) is forked once that import is done, not beside it; a job whose client goes away
    while it waits is forgotten, and the next one is served."""
    with open(tmp_path / "stderr", "wb") as stderr:
        process = WarmProcess(
            entries=(*handoff.ENTRY_POINTS, PROBE), stderr=stderr.fileno(), needs={PROBE: "snakeddp.train"}
        )
        process.path = process.start(env(None))
    try:
        gone = subprocess.Popen([sys.executable, "-m", PROBE, "imported"], env=env(process), cwd=REPO)
        # Connected and waiting (a sleep stood for that, which a loaded machine's start of Python can outlast).
        deadline = time.monotonic() + 60
        while gone.poll() is None and not connected(gone):
            assert time.monotonic() < deadline, "the job never asked the warm process"
            time.sleep(0.02)
        gone.kill()
        gone.wait()
        assert served_with_torch(process) is True
    finally:
        process.close()
    assert (tmp_path / "stderr").read_text() == ""


def test_a_warm_process_imports_what_its_invocations_jobs_import(tmp_path):
    """Started for data jobs only (snakeddp.warm.preload.for_rules of the pending jobs' rules), it has
    imported what a partition's step needs and no torch; started for a train job, torch too."""
    assert set(preload.BY_RULE) <= set(workflow_rules.BY_RULE), "a renamed rule would lose its preload silently"
    assert "torch" not in preload.for_rules(["data_partition", "data_manifest", "env_capture", "run_config"])
    assert preload.for_rules(["report"]) == (*handoff.ENTRY_POINTS, "snakeddp.report.job")
    assert preload.for_rules(["search_train", "data_val"]) == tuple(
        module
        for module in preload.ALL
        if module in {*handoff.ENTRY_POINTS, *preload.DATA, *preload.TRAINING, *preload.TABLE}
    )
    # The probe's `imported` step needs what a train job needs (a need keyed by its step, not its module).
    needs = {f"{PROBE} imported": "snakeddp.train"}
    for rules, torch in ((["data_partition"], False), (["train"], True)):
        process = WarmProcess(entries=(*handoff.ENTRY_POINTS, PROBE), needs=needs)
        process.path = process.start(env(None), preload=preload.for_rules(rules))
        try:
            assert process.imported(timeout=120)
            assert served_with_torch(process) is torch
        finally:
            process.close()


def test_a_stop_during_an_import_ends_the_warm_process_without_waiting_for_the_import(tmp_path):
    """Snakemake stops its warm process when the workflow ends, maybe while it still imports (Lightning's
    import takes 1-2 s): it ends at once, by its own stop (exit 0), not by close()'s SIGKILL 10 s later."""
    began = tmp_path / "began"
    process = WarmProcess()
    process.path = process.start(env(None, SLOW_IMPORT=str(began)), preload=("tests.warm.slow_import",))
    deadline = time.monotonic() + 60
    while not began.exists():
        assert process.process.poll() is None and time.monotonic() < deadline, "the import never began"
        time.sleep(0.05)
    server = process.process
    process.close()
    assert server.returncode == 0
    assert not Path(process.path).parent.exists()


@pytest.mark.parametrize(
    ("args", "returncode"),
    [(("exit", "3"), 3), (("_exit", "7"), 7), (("raise",), 1), (("kill", "SIGSEGV"), -signal.SIGSEGV),
     (("kill", "SIGKILL"), -signal.SIGKILL), (("exit", "0"), 0)],
)  # fmt: skip
def test_a_forked_job_ends_as_a_fresh_process_would(warm, args, returncode):
    """Its exit status, as Snakemake sees it from the job's process: codes, a crash's traceback,
    os._exit, death by a signal (the client dies of the same one)."""
    warm_done, cold_done = probe(warm, *args), probe(None, *args)
    assert warm_done.returncode == cold_done.returncode == returncode
    if args == ("raise",):
        assert "RuntimeError: the step failed" in warm_done.stderr
        assert warm_done.stderr.splitlines()[-3:] == cold_done.stderr.splitlines()[-3:]


def wait_ready(process: subprocess.Popen) -> None:
    assert process.stdout.readline().strip() == "ready"


def waiting(socket_path: str, directory: Path, **popen) -> tuple[subprocess.Popen, int]:
    """A probe job that waits (SIGUSR1 counted, SIGTERM and Ctrl-C end it), handed to the warm process at
    ``socket_path``: its client, once the job runs, and the forked job's pid."""
    pidfile = directory / "pid"
    job = subprocess.Popen(
        [sys.executable, "-m", PROBE, "wait", str(pidfile)], env={**env(None), handoff.SOCKET: socket_path},
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen,
    )  # fmt: skip
    wait_ready(job)
    return job, int(pidfile.read_text())


@pytest.mark.parametrize(
    ("signum", "returncode", "said"),
    [(signal.SIGINT, -signal.SIGINT, "KeyboardInterrupt"), (signal.SIGTERM, 1, "SIGTERM after 2 SIGUSR1")],
)
def test_signals_reach_the_forked_job_once(warm, tmp_path, signum, returncode, said):
    """What the job's process gets (Ctrl-C, Snakemake's or a scheduler's SIGTERM, SIGUSR1) reaches the
    forked job once, whether sent to the process or to its process group as a terminal does."""
    job, child = waiting(warm.path, tmp_path, start_new_session=True)
    assert child != job.pid  # forked by the warm process, not the client itself
    # Each SIGUSR1 is sent once the job has counted the one before: two of one signal pending at once are one, for
    # any process (a sleep between them stood for that, which a loaded machine can outlast).
    os.kill(job.pid, signal.SIGUSR1)
    usr1_counted(tmp_path, 1)
    os.killpg(job.pid, signal.SIGUSR1)  # the client's group: the child, in a session of its own, only via the client
    usr1_counted(tmp_path, 2)
    os.killpg(job.pid, signum)
    _, stderr = job.communicate(timeout=30)
    assert job.returncode == returncode, stderr
    assert said in stderr


def usr1_counted(directory: Path, count: int) -> None:
    """Wait until the probe job waiting in ``directory`` has counted ``count`` SIGUSR1."""
    counted, deadline = directory / "pid.usr1", time.monotonic() + 30
    while not (counted.is_file() and counted.read_text() == str(count)):
        assert time.monotonic() < deadline, f"the job never counted {count} SIGUSR1"
        time.sleep(0.02)


# The real-time signal Snakemake's process relays a stop it got alone as (snakeddp.util.relays).
RELAY = {stop: relay for relay, stop in relays.RELAYED.items()}
# What the probe's `count` says once it stopped: the SIGINT and the SIGTERM it counted.
COUNTED = {signal.SIGINT: "1 SIGINT 0 SIGTERM", signal.SIGTERM: "0 SIGINT 1 SIGTERM"}


def counting(warm: WarmProcess | None, directory: Path) -> subprocess.Popen:
    """A probe job that counts the stops it gets, in a session of its own (as Snakemake's job, here this test's),
    where Snakemake's process relays: forked by ``warm``, or cold (SNAKEDDP_WARM_START=0, `--sdm conda`)."""
    pidfile = directory / "pid"
    job = subprocess.Popen(
        [sys.executable, "-m", PROBE, "count", str(pidfile)], env=env(warm, **{relays.RELAYING: "1"}), cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    wait_ready(job)
    assert (int(pidfile.read_text()) != job.pid) == (warm is not None)
    return job


@pytest.mark.parametrize(
    ("group", "signum"),
    [(None, signal.SIGINT), (signal.SIGINT, signal.SIGINT), (None, signal.SIGTERM), (signal.SIGTERM, signal.SIGTERM),
     (signal.SIGHUP, signal.SIGTERM)],
    ids=["SIGINT-alone", "SIGINT-and-its-group", "SIGTERM-alone", "SIGTERM-and-its-group", "SIGHUP-and-its-group"],
)  # fmt: skip
@pytest.mark.parametrize("start", ["forked", "cold"])
def test_a_signal_snakemakes_process_got_reaches_the_job_once(warm, tmp_path, start, group, signum):
    """This process stands for Snakemake's: a SIGINT or SIGTERM it got alone (`kill PID`) it relays to its
    jobs, where a forked job's client passes it on and a cold job (SNAKEDDP_WARM_START=0, `--sdm conda`) acts
    on it itself, in its own handler for that signal; one the job's process group got too (a terminal's
    Ctrl-C), the job has had already, and gets once. A closed terminal hangs up the whole group: Snakemake's
    process relays SIGHUP as SIGTERM, and the job, which took its own SIGHUP as SIGTERM (as snakeddp.launch
    does), stops once."""
    with stops_as_typed():
        job = counting(warm if start == "forked" else None, tmp_path)
    if group:
        os.killpg(job.pid, group)
        time.sleep(0.3)  # handled by the job meanwhile: a second one would count (two pending at once are one)
    assert interrupt.relay_to_clients(RELAY[signum]) == 1
    stdout, stderr = job.communicate(timeout=30)
    assert (job.returncode, stdout.splitlines()[-1]) == (0, COUNTED[signum]), stderr


def test_under_nohup_a_hang_up_stops_no_job_and_a_later_sigterm_still_does(warm, tmp_path):
    """`nohup snakemake ...`: SIGHUP is ignored in Snakemake's process and in its jobs, which inherit that. The
    terminal's hang-up stops nothing, and a `kill PID` of Snakemake's later still stops the job: a client that
    passed the hang-up on had counted it as the SIGTERM Snakemake's process relays, and dropped that relay. (A
    forked job: its client and the probe both go by relays.with_hangup, as a cold launcher does.)"""
    ignored = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        job = counting(warm, tmp_path)
    finally:
        signal.signal(signal.SIGHUP, ignored)
    os.killpg(job.pid, signal.SIGHUP)
    with pytest.raises(subprocess.TimeoutExpired):
        job.wait(timeout=1.5)  # a stop ends the probe a second after it came
    assert interrupt.relay_to_clients(RELAY[signal.SIGTERM]) == 1
    stdout, stderr = job.communicate(timeout=30)
    assert (job.returncode, stdout.splitlines()[-1]) == (0, COUNTED[signal.SIGTERM]), stderr


def test_a_ctrl_c_that_comes_before_the_job_is_forked_reaches_it(warm, tmp_path):
    """A Ctrl-C sent while the job's request waits on the warm process (stopped here; busy on CI, where the
    job printed before its client read the answer) is passed on once the job is forked, not raised in the
    client (which left the job running): the job dies of it, as it starts, and its client the same way."""
    server = psutil.Process(warm.process.pid)
    tree = [server, *server.children(recursive=True)]
    for process in tree:
        process.suspend()
    try:
        job = subprocess.Popen(
            [sys.executable, "-m", PROBE, "wait", str(tmp_path / "pid")], env=env(warm), cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        # Its one socket: the connection to the warm process (a client's end of one names no path).
        while not psutil.Process(job.pid).net_connections(kind="unix"):
            assert job.poll() is None and time.monotonic() < deadline, "the job never asked the warm process"
            time.sleep(0.05)
        job.send_signal(signal.SIGINT)
        time.sleep(0.5)
    finally:
        for process in tree:
            process.resume()
    _, stderr = job.communicate(timeout=60)
    assert job.returncode == -signal.SIGINT, stderr
    # No client's traceback (snakeddp.util.handoff's frames). The job's own goes to its stderr only once the job
    # holds it: a Ctrl-C that comes sooner is told in the warm process's log.
    assert "handoff" not in stderr, stderr


def test_a_killed_client_takes_its_job_along(warm, tmp_path):
    """SIGKILL cannot be passed on: the warm process sees the client's connection close and kills the job."""
    job, child = waiting(warm.path, tmp_path)
    job.kill()
    job.wait()
    assert all_gone([child], within=5)


def test_two_jobs_forked_at_once_run_side_by_side(warm, tmp_path):
    jobs = [
        subprocess.Popen(
            [sys.executable, "-m", PROBE, "wait", str(tmp_path / f"pid{n}"), "1.5"],
            env=env(warm),
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in (0, 1)
    ]
    for job in jobs:
        wait_ready(job)  # both are running before either ends
    pids = {int((tmp_path / f"pid{n}").read_text()) for n in (0, 1)}
    assert len(pids) == 2 and not pids & {job.pid for job in jobs}
    for job in jobs:
        out, _ = job.communicate(timeout=30)
        assert job.returncode == 0 and "done after 0 SIGUSR1" in out


def test_a_job_with_another_import_path_starts_cold_and_the_workflow_says_why_once(warm):
    """The fallback: a job the warm process would not be (here PYTHONPATH differs) runs cold, the same."""
    other = env(warm)
    other["PYTHONPATH"] += f"{os.pathsep}/nonexistent"
    for _ in range(2):
        done = probe(warm, "observe", env=other)
        assert done.returncode == 0 and json.loads(done.stdout)["served"] is False
    said = [line for line in warm.log.read_text().splitlines() if "import path differs" in line]
    assert len(said) == 1 and "HINT: " in said[0] and "SNAKEDDP_WARM_START=0" in said[0]


def request(path: str, module: str) -> dict | None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        cwd = os.open(".", os.O_RDONLY)
        try:
            message = {"module": module, "argv": ["-c", "print(1)"], "stdio": [True, True, True]}
            handoff.send(sock, message, [0, 1, 2, cwd])
            answer, fds = handoff.receive(sock, max_fds=1)
        finally:
            os.close(cwd)
        assert not fds  # no pidfd: nothing was forked
        return answer


def test_a_request_for_a_program_that_is_not_a_step_is_refused(warm):
    for module in ("os", "runpy", "snakeddp.cli", "code"):
        answer = request(warm.path, module)
        assert answer is not None and "is not a step of the workflow" in answer["declined"]
    assert any("'runpy' is not a step of the workflow" in line for line in warm.log.read_text().splitlines())


def as_nobody(path: str) -> str:
    """Connect to ``path`` as uid 65534 (from a child that drops root) and say what happened."""
    script = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print('refused', e.errno); sys.exit()\n"
        "try:\n    s.sendall(b'x' * 8)\n    print('answer', s.recv(64))\n"
        "except (BrokenPipeError, ConnectionResetError):\n    print('answer', b'')\n"
    )
    done = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def test_another_user_can_neither_reach_nor_use_the_warm_process(warm):
    """The directory (0700) keeps other users out; were it opened up, SO_PEERCRED still turns them away."""
    directory = Path(warm.path).parent
    assert directory.stat().st_mode & 0o777 == 0o700
    assert as_nobody(warm.path) == f"refused {13}"  # EACCES
    directory.chmod(0o755)
    os.chmod(warm.path, 0o777)
    try:
        assert as_nobody(warm.path) == "answer b''"  # closed without an answer, nothing forked
    finally:
        directory.chmod(0o700)
    assert any("refused a connection from uid 65534" in line for line in warm.log.read_text().splitlines())


def test_the_warm_process_goes_away_with_its_parent_and_takes_its_jobs(tmp_path):
    """kill -9 of Snakemake (here a stand-in parent): the warm process stops its jobs and exits."""
    script = (
        "import os, sys, time\n"
        "from snakeddp.warm.process import WarmProcess\n"
        "from snakeddp.util import handoff\n"
        f"w = WarmProcess(entries=(*handoff.ENTRY_POINTS, {PROBE!r}))\n"
        "print(w.start(), w.process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], env=env(None), cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    path, server = parent.stdout.readline().split()
    job, child = waiting(path, tmp_path)
    children = [process.pid for process in psutil.Process(int(server)).children(recursive=True)]
    assert len(children) == 2  # the job and the heavy warm process
    parent.kill()
    parent.wait()
    assert all_gone([child, int(server), *children], within=8)
    _, stderr = job.communicate(timeout=10)
    assert job.returncode == 1 and "SIGTERM after 0 SIGUSR1" in stderr  # the job was asked to stop first


def test_a_job_whose_warm_process_is_killed_ends_as_killed(tmp_path):
    """The warm process itself killed (SIGKILL, no status sent): its jobs die with it (PR_SET_PDEATHSIG) and
    each client, finding no status, says so in one line and dies of SIGKILL too, as its job did; never
    does it run the job again, cold (the job told it it runs before it ran: a server killed between its
    fork and an answer of its own did that once in 25 to 50 kills, hence eight of them)."""
    for attempt in range(8):
        process = WarmProcess(entries=(*handoff.ENTRY_POINTS, PROBE))
        path = process.start(env(None))
        try:
            job, child = waiting(path, tmp_path)
            process.process.kill()
            _, stderr = job.communicate(timeout=30)
            assert job.returncode == -signal.SIGKILL, (attempt, stderr)
            assert stderr.splitlines()[-1] == "snakeddp: the workflow's warm process ended before this job did."
            assert all_gone([child], within=5)
        finally:
            process.close()
