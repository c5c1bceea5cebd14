"""Shared fixtures. What tests import (configs, dataset writers, the Workflow harness) is in tests/helpers.py."""

from __future__ import annotations

import copy
import json
import resource
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from snakeddp.run.variables import WARM_START
from snakeddp.util import handoff
from tests import forked_snakemake, workflow_venv
from tests import mlflow_server as mlflow_server_module
from tests.gpu_standin import Checks
from tests.helpers import (
    CONFIG_SECRET,
    GPU_TEST,
    REPO,
    SECRETS,
    SWEEP,
    TINY,
    Workflow,
    azureml_v1_installed,
    subprocess_env,
    tmpfs,
)

# How long each test file took in the last measured run of the whole suite (`make durations` writes it).
DURATIONS = Path(__file__).with_name("durations.json")
# Seconds per test file so far, in the process that reports the tests (xdist's controller, or the only one).
FILE_SECONDS: dict[str, float] = {}
# CPU seconds per test file so far (the test process and the children it waited for: Snakemake, the jobs and
# ranks it started, and the Snakemake runs forked for it, tests.forked_snakemake; not daemons such as a
# cluster's), the same way. On CI's 2 busy cores the suite's time is its CPU, and the table of it at the end of
# every run says which files spend it.
FILE_CPU: dict[str, float] = {}
CPU_SHOWN = 25
# Per xdist worker: when its last test ended (seconds after the controller's start) and its files, in order. The
# run ends with its last worker: the summary says which, and with which files, so a slow tail is found in CI's log.
WORKER_ENDS: dict[str, float] = {}
WORKER_FILES: dict[str, list[str]] = {}
_STARTED = time.monotonic()
_cpu_at_last_report = [0.0]
# CPU of the session's own processes (the kept warm ones) waited for at its end, when the last file's teardown
# runs: theirs, not that file's; the table shows it on a line of its own.
SESSION_CPU = "(the session's kept warm processes)"
_session_cpu = [0.0]


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    forked = forked_snakemake.forked_cpu_s[0]  # the runs a server forked for this process: not its children
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The SDK v1 tests need azureml-core, which only .venv-azureml-v1 has (its caps conflict with the dev
    lock): elsewhere they are deselected, and tests/azureml/test_sdk_v1.py runs them in that venv.

    The files run longest first (a file's tests keep their order): `make test`'s workers take whole files
    in this order (--dist loadfile --no-loadscope-reorder), so the last files either worker takes are
    short ones and both finish at about the same time. A file not measured yet counts as a long one."""
    if not azureml_v1_installed():
        v1 = [item for item in items if item.get_closest_marker("azureml_v1")]
        if v1:
            config.hook.pytest_deselected(items=v1)
            items[:] = [item for item in items if not item.get_closest_marker("azureml_v1")]
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    unmeasured = max(seconds.values(), default=0.0)
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], unmeasured))


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run with -p no:xdist has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """The Slurm files in a lane of their own where there are workers enough (tests/lanes.py)."""
    from tests import lanes  # imports xdist, which .venv-azureml-v1 (tests/azureml/test_sdk_v1.py) has not

    return lanes.scheduler(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cold-unless-e2e",
        action="store_true",
        help="start every job and rank cold (SNAKEDDP_WARM_START=0) in the tests not marked e2e, slurm or gpu: "
        "`make test` runs each test once, the end-to-end ones as users run (warm), the rest cold",
    )
    parser.addoption(
        "--write-durations",
        action="store_true",
        help=f"write how long each test file took (setup, call and teardown of its tests) to {DURATIONS.name}; "
        "run the whole suite with it (`make durations`)",
    )


def pytest_runtestloop(session: pytest.Session) -> None:
    """The first test's CPU starts here, not with the interpreter's start and the collection."""
    _cpu_at_last_report[0] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Each phase's report (in the process that ran it, an xdist worker's too) carries the CPU spent since the
    previous one: its own and its waited-for children's."""
    outcome = yield
    now = _cpu_seconds()
    report = outcome.get_result()
    report.user_properties.append(("cpu_s", now - _cpu_at_last_report[0] - _session_cpu[0]))
    if _session_cpu[0]:
        report.user_properties.append(("session_cpu_s", _session_cpu[0]))
        _session_cpu[0] = 0.0
    _cpu_at_last_report[0] = now


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::")[0]
    worker = getattr(getattr(report, "node", None), "gateway", None)
    if worker is not None:
        WORKER_ENDS[worker.id] = time.monotonic() - _STARTED
        files = WORKER_FILES.setdefault(worker.id, [])
        if not files or files[-1] != path:
            files.append(path)
    FILE_SECONDS[path] = FILE_SECONDS.get(path, 0.0) + report.duration
    cpu = sum(value for name, value in report.user_properties if name == "cpu_s")
    FILE_CPU[path] = FILE_CPU.get(path, 0.0) + cpu
    session = sum(value for name, value in report.user_properties if name == "session_cpu_s")
    if session:
        FILE_CPU[SESSION_CPU] = FILE_CPU.get(SESSION_CPU, 0.0) + session
        FILE_SECONDS.setdefault(SESSION_CPU, 0.0)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """The files that spent the most CPU, with their wall time: where the suite's time goes on CI."""
    if hasattr(config, "workerinput") or not FILE_CPU:
        return
    total = sum(FILE_CPU.values())
    terminalreporter.section(f"CPU per test file: {total:.0f} s in all, the {CPU_SHOWN} that spent most")
    for path, cpu in sorted(FILE_CPU.items(), key=lambda item: -item[1])[:CPU_SHOWN]:
        terminalreporter.write_line(f"{cpu:8.1f} s CPU {FILE_SECONDS[path]:8.1f} s wall  {path}")
    for worker, ended in sorted(WORKER_ENDS.items(), key=lambda item: item[1]):
        files = WORKER_FILES[worker]
        terminalreporter.write_line(
            f"worker {worker}: its last test ended {ended:.0f} s after the start; {len(files)} files, the last "
            + ", ".join(path.removeprefix("tests/") for path in files[-3:])
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if config.getoption("write_durations") and not hasattr(config, "workerinput"):
        rounded = {path: round(seconds, 1) for path, seconds in sorted(FILE_SECONDS.items())}
        DURATIONS.write_text(json.dumps(rounded, indent=1) + "\n")


@pytest.fixture(autouse=True)
def gpus_only_for_gpu_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes a test starts see no GPU (subprocess_env), unless the test is marked gpu."""
    if request.node.get_closest_marker("gpu"):
        monkeypatch.setenv(GPU_TEST, "1")
    else:
        monkeypatch.delenv(GPU_TEST, raising=False)


@pytest.fixture(autouse=True)
def signal_handlers_kept() -> Iterator[None]:
    """Each test leaves this worker's signal handlers as it found them. Lightning's fit ignores SIGINT for good
    once a KeyboardInterrupt reaches it (lightning/pytorch/trainer/call.py), and every process a later test of
    the worker started inherited that: a fresh rank then differed from a forked one (CI, in whichever worker
    ran such a test first)."""
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    yield
    for signum, handler in kept.items():
        if handler is not None and signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)


@pytest.fixture(autouse=True)
def cold_unless_e2e(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --cold-unless-e2e, the processes a test not marked e2e, slurm or gpu starts begin cold: the warm
    path is the one the end-to-end tests take, so each path is run by the suite without running a test twice."""
    if request.config.getoption("cold_unless_e2e") and not any(
        request.node.get_closest_marker(marker) for marker in ("e2e", "slurm", "gpu")
    ):
        monkeypatch.setenv(WARM_START, "0")


@pytest.fixture(scope="module", autouse=True)
def workflow_venv_of_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module marked dev_venv builds its fixtures' workflows in the dev venv; every other one in the core venv
    (tests.workflow_venv)."""
    with workflow_venv.dev(request.node.get_closest_marker("dev_venv") is not None):
        yield


@pytest.fixture(autouse=True)
def workflow_venv_of_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked dev_venv (or in a module or class that is) runs its workflows in the dev venv."""
    with workflow_venv.dev(request.node.get_closest_marker("dev_venv") is not None):
        yield


class KeptWarm(NamedTuple):
    socket: str  # what its export line names
    log: Path  # what it said (the jobs it declined)


class KeptWarmProcesses:
    """One `snakeddp warm` per venv the workflows run in (tests.workflow_venv), started by the first file that keeps
    one and kept for the rest of this worker's session, as a user keeps one through a day's work; each gets
    Ctrl-C at the end, as the user's would. A file's own start cost about what its few invocations saved."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.kept: dict[Path, tuple[subprocess.Popen, KeptWarm]] = {}

    def of_this_venv(self) -> KeptWarm:
        venv = workflow_venv.bin_dir()
        if venv not in self.kept:
            self.kept[venv] = self.start()
        process, warm = self.kept[venv]
        if process.poll() is not None:  # a later file would fall back to warm processes of its own, unseen
            pytest.fail(f"the kept snakeddp warm of {venv} exited ({process.returncode}): {warm.log.read_text()}")
        return warm

    def start(self) -> tuple[subprocess.Popen, KeptWarm]:
        log = self.tmp_path_factory.mktemp("kept-warm") / "snakeddp-warm.log"
        with log.open("w") as stderr:
            warm = subprocess.Popen(
                [str(workflow_venv.snakeddp()), "warm"],  # the workflows' venv: it forks their jobs
                cwd=REPO,  # where the tests' Snakefile is
                env=subprocess_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        line = warm.stdout.readline() if warm.stdout else ""
        if not line.startswith(f"export {handoff.SOCKET}="):
            warm.kill()  # nothing left running by a fixture that failed
            pytest.fail(f"snakeddp warm printed {line!r}: {log.read_text()}")
        return warm, KeptWarm(shlex.split(line.partition("=")[2])[0], log)

    def stop(self) -> None:
        for process, _ in self.kept.values():  # every one told first: a failed check leaves none running
            process.send_signal(signal.SIGINT)
        for process, warm in self.kept.values():
            assert process.wait(timeout=60) == 0, warm.log.read_text()
            assert not Path(warm.socket).parent.exists(), "snakeddp warm removes its directory"


@pytest.fixture(scope="session")
def kept_warm_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeptWarmProcesses]:
    processes = KeptWarmProcesses(tmp_path_factory)
    yield processes
    before = _cpu_seconds()
    processes.stop()
    _session_cpu[0] += _cpu_seconds() - before


@pytest.fixture(scope="module")
def kept_warm(kept_warm_processes: KeptWarmProcesses, workflow_venv_of_module: None) -> Iterator[KeptWarm]:
    """The warm process a user keeps, for a test file's local invocations: `snakeddp warm`'s export line in the
    environment the file's processes get (subprocess_env). Each invocation then forks its jobs from it instead
    of importing torch and Lightning in a warm process of its own (a TINY pipeline: 4.1 s of CPU instead of
    13.3 s). A file takes it with pytestmark's usefixtures("kept_warm"); the process is the session's, one per
    venv (KeptWarmProcesses)."""
    warm = kept_warm_processes.of_this_venv()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(handoff.SOCKET, warm.socket)
        yield warm


@pytest.fixture
def workflow(tmp_path: Path) -> Workflow:
    return Workflow(tmp_path)


@pytest.fixture
def tiny_config() -> dict:
    """A config that trains in seconds; tests copy and adjust it."""
    return copy.deepcopy(TINY)


@pytest.fixture(scope="session")
def sweep_workflow(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    """The whole pipeline (data, two DDP runs of world size 1 and 2, report) run once for all tests
    that only read its results, with secret-looking variables set in its environment and a
    credential in its config. In the dev venv: tests verify its runs in this process."""
    with workflow_venv.dev(True):
        flow = Workflow(tmp_path_factory.mktemp("sweep"))
    flow.write_config({**SWEEP, **CONFIG_SECRET})
    # The credentials stay exported for every later invocation, as in the user's shell: a value known to be
    # secret only from the environment (spark.app.owner repeats MY_TOKEN) is masked where it is set.
    flow.env = subprocess_env(**SECRETS)
    # What the user saw on the terminal, for the tests of progress lines.
    flow.first_run = flow.run()
    return flow


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory):
    """A real ``mlflow server`` on a free localhost port (sqlite store, model registry, proxied artifacts),
    started once for the session by the first test that asks for it (tests/mlflow_server.py)."""
    yield from mlflow_server_module.serve(tmp_path_factory.mktemp("mlflow-server"))


@pytest.fixture(scope="session")
def standin_checks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checks]:
    """Short checks on stand-in GPU machines (tests/gpu_standin.py), each a process forked from one interpreter
    per torch build that imported torch once for the whole session (its workers are stopped at the end)."""
    checks = Checks(tmp_path_factory.mktemp("standin-checks"))
    yield checks
    checks.close()


@pytest.fixture
def disk(tmp_path):
    """A 256 KiB filesystem of its own (tmpfs, as root), where a write meets a full disk."""
    with tmpfs(tmp_path / "disk", "size=256k") as mount:
        yield mount
