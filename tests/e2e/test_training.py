"""Training processes for real: rank sharding, kill -9 and preemption resumes, corrupted data."""

import contextlib
import hashlib
import json
import os
import pickle
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from snakeddp.run import attempt as runstate
from snakeddp.run import tries
from snakeddp.util import handoff, relays
from snakeddp.workflow import interrupt
from tests.helpers import TINY, as_typed_in_a_terminal, subprocess_env
from tests.training_runs import SIGNALLED_RECORDS, Run, slow_config

# The runs that no test signals or kills (each rerun that resumes one, a reference, a run that fails on its data) are
# forked from the kept warm process (Run.train(kept_warm=True)), the dev venv's, whose interpreter these runs are;
# the runs a test stops, kills or compares warm with cold start their own.
pytestmark = [pytest.mark.e2e, pytest.mark.dev_venv, pytest.mark.usefixtures("kept_warm")]


# The real-time signal Snakemake's process relays a stop it got alone as (snakeddp.util.relays).
RELAY = {stop: relay for relay, stop in relays.RELAYED.items()}
# Columns of metrics.csv that measure the wall clock (everything else must match value for value).
CLOCK = {"train_seconds", "epoch_seconds", "samples_per_s", "data_wait_s", "finished_at"}
# Two ranks, two partitions of an odd size, every sample traced.
TRACED = {
    "data": {"num_train_files": 2, "num_records_per_train_file": 301, "num_val_records": 50, "num_features": 4},
    "trainer": {"max_epochs": 3, "batch_size": 16, "trace_samples": True},
    "launch": {"devices": 2},
}


@pytest.fixture(scope="module")
def warm_and_cold(tmp_path_factory) -> dict[str, Run]:
    """The TRACED config trained twice, once with SNAKEDDP_WARM_START=1 (the default: ranks forked from one
    warm process) and once with 0 (cold ranks), each checked to have started its ranks that way."""
    runs = {}
    for switch in ("1", "0"):
        run = Run(tmp_path_factory.mktemp(f"fork-{switch}"), TRACED)
        run.env = {"SNAKEDDP_WARM_START": switch}
        assert run.train() == 0, run.log.read_text()[-3000:]
        log = run.log.read_text()
        assert "cold" not in log and ("--fork-ranks" in log) == (switch == "1"), log[-3000:]
        runs[switch] = run
    return runs


def test_each_sample_seen_by_exactly_one_rank_per_epoch(warm_and_cold):
    run = warm_and_cold["1"]
    traces = run.traces()
    assert len(traces) == 6
    for epoch in range(3):
        ranks = {t["rank"]: set(t["ids"]) for t in traces if t["epoch"] == epoch}
        assert set(ranks) == {0, 1}
        assert not ranks[0] & ranks[1], "disjoint across ranks"
        assert ranks[0] | ranks[1] == run.partition_ids(epoch % 2), "union is the epoch's partition"
        assert {t["partition"] for t in traces if t["epoch"] == epoch} == {epoch % 2}


def test_ranks_forked_from_one_warm_process_train_what_cold_ranks_train(warm_and_cold):
    """The same config with SNAKEDDP_WARM_START=1 (the default) and 0: every rank sees the same
    samples of the same partitions in every epoch, and the weights and metrics are identical; only
    provenance's rank_start (and each rank's start) tells them apart."""
    seen = {}
    for switch, run in warm_and_cold.items():
        record = json.loads((run.dir / "provenance.json").read_text())
        rows = [{k: v for k, v in row.items() if k not in CLOCK} for row in run.metrics()]
        weights = torch.load(run.dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        traces = sorted((t["epoch"], t["rank"], t["partition"], t["ids"]) for t in run.traces())
        seen[switch] = record, rows, weights, traces
    (warm, warm_rows, warm_weights, warm_traces), (cold, cold_rows, cold_weights, cold_traces) = seen["1"], seen["0"]
    assert (warm["launch"]["rank_start"], cold["launch"]["rank_start"]) == ("warm", "cold")
    assert [r["start"] for r in warm["launch"]["ranks"]] == ["warm", "warm"]
    assert warm_traces == cold_traces and len(warm_traces) == 6
    assert warm_rows == cold_rows
    assert warm_weights.keys() == cold_weights.keys()
    assert all(torch.equal(warm_weights[name], cold_weights[name]) for name in warm_weights)


def test_ctrl_c_stops_every_rank_and_a_rerun_resumes(tmp_path):
    """Ctrl-C signals the terminal's foreground process group, here the launcher's; the ranks, in
    sessions of their own, get it passed on (tests/cluster/test_supervisor.py counts it once per rank).
    Snakemake's process, which got it too, relays it to its cold job (this launcher), which had it already.
    It lands after the first epoch's progress line, before its checkpoints are saved (the model's epoch-end hook,
    between the two, waits for it on every rank): the ranks save them first, Lightning shuts down gracefully, no
    traceback, nothing left running, and the rerun goes on with the second epoch."""
    run = users_model_run(tmp_path, "stops_after_the_line:StopsAfterTheLine", STOPS_AFTER_THE_LINE)
    (tmp_path / "sitecustomize.py").write_text(STACKS_ON_SIGNAL)
    at_the_line = tmp_path / "at-the-line"
    at_the_line.mkdir()
    run.env.update({relays.RELAYING: "1", "AT_THE_LINE": str(at_the_line)})
    process = run.start()
    deadline = time.monotonic() + 300
    while len(list(at_the_line.iterdir())) < 2:
        assert process.poll() is None, run.log.read_text()[-3000:]
        assert time.monotonic() < deadline, "training too slow"
        time.sleep(0.05)
    pids = rank_pids(run.dir)
    assert "base: epoch 1/3" in run.log.read_text() and not list(run.dir.glob("checkpoints/*.ckpt"))
    os.killpg(process.pid, signal.SIGINT)
    assert interrupt.relay_to_clients(RELAY[signal.SIGINT]) == 1  # this process stands for Snakemake's
    assert ended_within(120, process, run.log, pids) == 1
    log = run.log.read_text()
    assert "Detected KeyboardInterrupt" in log and "Traceback" not in log, log[-3000:]
    assert [t["outcome"] for t in json.loads((run.dir / "tries.json").read_text())["tries"]] == ["interrupted"]
    for pid in pids.values():
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert torch.load(run.dir / "checkpoints/last.ckpt", weights_only=True)["epoch"] == 0, "the first epoch kept"
    run.env.pop("AT_THE_LINE")
    assert run.train() == 0, run.log.read_text()[-3000:]
    assert "resuming from" in run.log.read_text()
    assert "base: training from epoch 2/3 on 2 processes" in run.log.read_text(), "the first epoch not trained again"
    assert [int(r["epoch"]) for r in run.metrics()] == [0, 1, 2]


def ended_within(seconds: float, process: subprocess.Popen, log: Path, ranks: dict[int, int]) -> int:
    """The launcher's exit code; where it has not ended in ``seconds``, a failure that says where each process of
    the run is (its threads' kernel waits and signal masks, from /proc), who else holds the launcher's pipes, and
    each one's Python stacks in the log (STACKS_SIGNAL, on which the run's sitecustomize dumps them)."""
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        launcher = psutil.Process(process.pid)  # a zombie until waited for: still there
    pids = dict.fromkeys([launcher.pid, *(child.pid for child in launcher.children(recursive=True)), *ranks.values()])
    pipes = {os.readlink(fd) for fd in Path(f"/proc/{launcher.pid}/fd").iterdir() if "pipe:" in os.readlink(fd)}
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError, ValueError):
            if os.readlink(fd) in pipes:
                pids[int(fd.parent.parent.name)] = None
    states = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:4]
            waits = [
                f"{(t / 'comm').read_text().strip()}:{(t / 'wchan').read_text()}"
                for t in Path(f"/proc/{pid}/task").iterdir()
            ]
        except OSError:
            continue  # ended meanwhile
        shown = ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
        masks = " | ".join(line for line in status if line.startswith(shown))
        states.append(f"{pid} {b' '.join(command).decode(errors='replace')} threads {' '.join(waits)} {masks}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, STACKS_SIGNAL)
    time.sleep(2)
    process.kill()
    pytest.fail(f"the launcher did not end within {seconds} s\n" + "\n".join(states) + "\n" + log.read_text()[-12000:])


# Each process of the run dumps its threads' Python stacks to its stderr on it (faulthandler): the sitecustomize
# module below, on the run's PYTHONPATH, registers it in every interpreter the run starts, before its own code.
STACKS_SIGNAL = signal.SIGRTMIN + 10
STACKS_ON_SIGNAL = "import faulthandler, signal\nfaulthandler.register(signal.SIGRTMIN + 10, all_threads=True)\n"

# The built-in mlp, whose first epoch's end hook (after every other callback's: its metrics row and progress line,
# before the checkpoint callback saves) says on each rank that it is there, then waits for the rank's SIGINT.
STOPS_AFTER_THE_LINE = """
import os, signal, time
from pathlib import Path

from snakeddp.training.models import MLP


class StopsAfterTheLine(MLP):
    def on_train_epoch_end(self):
        if self.current_epoch != 0 or "AT_THE_LINE" not in os.environ:
            return
        came = []
        handler = signal.getsignal(signal.SIGINT)

        def seen(signum, frame):
            came.append(signum)
            handler(signum, frame)  # the rank's own: Python's KeyboardInterrupt, or what holds it

        signal.signal(signal.SIGINT, seen)
        try:
            Path(os.environ["AT_THE_LINE"], str(self.global_rank)).touch()
            deadline = time.monotonic() + 120
            while not came and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            signal.signal(signal.SIGINT, handler)
"""


def users_model_run(tmp_path: Path, target: str, source: str) -> Run:
    """TINY's two-rank run of the user's model ``target`` (a subclass of the built-in mlp), its module written from
    ``source`` where the run's processes import it."""
    (tmp_path / f"{target.partition(':')[0]}.py").write_text(source)
    config = {
        **TINY,
        "model": {"target": target, "kwargs": {"hidden_sizes": [16]}},
        "launch": {**TINY["launch"], "devices": 2},
        "trainer": {**TINY["trainer"], "early_stopping": {"enabled": False}},
    }
    run = Run(tmp_path, config)
    run.env = {"PYTHONPATH": str(tmp_path)}
    return run


KILLS_ONE_RANK = """
import os, signal
from pathlib import Path

from snakeddp.training.models import MLP


class KillsRankOne(MLP):
    def on_train_batch_start(self, batch, batch_idx):
        marker = Path(os.environ["KILL_ONCE"])
        if self.global_rank == 1 and self.current_epoch == 1 and batch_idx == 3 and marker.exists():
            marker.unlink()
            os.kill(os.getpid(), signal.SIGKILL)
"""


def test_one_rank_killed_is_named_with_its_signal_the_other_says_one_line_and_the_rerun_resumes(tmp_path):
    """kill -9 (or the OOM killer) of one rank: the supervisor names the rank and the signal, with the HINT to
    rerun; the other rank's collective fails on the gone peer, and it says so in one line without a HINT of its own
    (its traceback of torch's and gloo's frames, 100 lines, is kept beside the failure file, whose line it never
    writes: the launcher would then leave out the supervisor's); the rerun resumes."""
    run = users_model_run(tmp_path, "kills_rank_one:KillsRankOne", KILLS_ONE_RANK)
    (tmp_path / "kill-once").touch()
    run.env["KILL_ONCE"] = str(tmp_path / "kill-once")
    assert run.train() != 0
    log = run.log.read_text()
    (killed,) = [line for line in log.splitlines() if "was killed by SIGKILL" in line]
    assert killed.startswith("snakeddp.cluster.supervisor: rank 1 (pid ") and "HINT: rerun the same command" in killed
    assert log.count("another rank of the run is gone (gloo: ") == 1 and "Traceback" not in log, log[-3000:]
    assert log.count("HINT:") == 1, "the cause's line has it"
    assert not (run.dir / "failure.txt").exists()
    assert "Traceback" in (run.dir / "failure.traceback").read_text()

    assert run.train() == 0, run.log.read_text()[-3000:]
    assert "resuming from" in run.log.read_text()
    assert [int(r["epoch"]) for r in run.metrics()] == [0, 1, 2]


RAISES_IN_EPOCH_2 = """
import os

from snakeddp.training.models import MLP


class RaisesInEpoch2(MLP):
    def training_step(self, batch, batch_idx):
        if self.current_epoch == 1 and os.environ.get("BROKEN") == "1":
            batch.view(-1)  # a tuple, as a model written for another DataModule would treat it
        return super().training_step(batch, batch_idx)
"""


def test_an_exception_in_the_users_training_step_is_one_line_naming_its_place_and_the_fix_resumes(tmp_path):
    """Both ranks raise it: one line, once, naming the user's file and line, not each rank's 130 lines of runpy's,
    Lightning's and torch's frames; the traceback is kept beside the failure file; fixed, the run resumes."""
    run = users_model_run(tmp_path, "raises_in_epoch_2:RaisesInEpoch2", RAISES_IN_EPOCH_2)
    run.env["BROKEN"] = "1"
    assert run.train() != 0
    log = run.log.read_text()
    lines = [line for line in log.splitlines() if "in your code" in line]
    assert len(lines) == 1 and "Traceback" not in log, log[-3000:]
    line = lines[0]
    assert "AttributeError: 'list' object has no attribute 'view'" in line or "no attribute 'view'" in line, line
    assert "raised at " in line and "raises_in_epoch_2.py:10, in your code" in line and "HINT: fix it" in line
    assert "batch.view(-1)" in (run.dir / "failure.traceback").read_text()

    run.env["BROKEN"] = "0"  # fixed
    assert run.train() == 0, run.log.read_text()[-3000:]
    assert "resuming from" in run.log.read_text()
    assert [int(r["epoch"]) for r in run.metrics()] == [0, 1, 2]


def test_kill_9_then_rerun_resumes_from_last_checkpoint(tmp_path):
    run = Run(tmp_path, slow_config())
    process = run.start()
    run.wait_for_epochs(process, 2)
    # The launcher and torchrun die; the ranks must follow (they die with their parent), or the
    # rerun below refuses to start while they still hold the run directory.
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 30
    while True:
        try:
            runstate.ensure_no_live_attempt(run.dir)
            break
        except runstate.RunStateError:
            assert time.monotonic() < deadline, "ranks outlived their killed launcher"
            time.sleep(0.2)
    killed_at = len(run.metrics())
    assert killed_at < 5 and (run.dir / "checkpoints/last.ckpt").exists()
    assert not (run.dir / "provenance.json").exists()
    # The newest checkpoint saved whole: last.ckpt, or its epoch's top-k one where the kill came between the two.
    newest = tries.newest_checkpoint(run.dir)
    read = hashlib.sha256(newest.read_bytes()).hexdigest()

    assert run.train(kept_warm=True) == 0, run.log.read_text()[-3000:]
    assert "resuming from" in run.log.read_text()
    rows = run.metrics()
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3, 4], "epochs continue, none redone twice, none lost"
    assert [int(r["partition"]) for r in rows] == [0, 1, 2, 0, 1], "epoch k trains partition k mod P after resume"
    record = json.loads((run.dir / "provenance.json").read_text())
    assert record["training"]["resumed_from"]["path"] == f"checkpoints/{newest.name}"
    assert record["training"]["resumed_from"]["sha256"] == read, "the checkpoint as it was read, not as it is now"
    assert record["training"]["partitions_per_epoch"] == [0, 1, 2, 0, 1]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Run:
    """The signalled runs' config trained without a signal: what an exact resume reproduces."""
    reference = Run(tmp_path_factory.mktemp("uninterrupted"), slow_config(SIGNALLED_RECORDS, max_epochs=3))
    assert reference.train(kept_warm=True) == 0, reference.log.read_text()[-3000:]
    return reference


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM], ids=["SIGUSR1", "SIGTERM-relayed"])
def test_preemption_signal_saves_mid_epoch_and_resume_finishes_that_epoch(tmp_path, signum, uninterrupted):
    """SIGUSR1 from a scheduler, or SIGTERM as Snakemake's process relays it (a `kill PID` of the workflow's)
    to a train job that runs cold (SNAKEDDP_WARM_START=0, `--sdm conda`): this process stands for Snakemake's."""
    run = Run(tmp_path, slow_config(SIGNALLED_RECORDS, max_epochs=3))
    run.env[relays.RELAYING] = "1"
    process = run.start()
    run.wait_for_epochs(process, 1)
    time.sleep(0.5)
    if signum == signal.SIGTERM:
        assert interrupt.relay_to_clients(RELAY[signum]) == 1
    else:
        process.send_signal(signum)
    assert process.wait(timeout=300) == 75, run.log.read_text()[-3000:]
    assert "preempted in epoch" in run.log.read_text()
    assert json.loads((run.dir / "tries.json").read_text())["tries"][-1]["outcome"] == "preempted"
    interrupted = [t for t in run.traces() if not t["complete"]]
    assert interrupted, "the signal landed mid-epoch"
    epoch = interrupted[0]["epoch"]

    assert run.train(kept_warm=True) == 0, run.log.read_text()[-3000:]
    traces = [t for t in run.traces() if t["epoch"] == epoch]
    seen = [i for t in traces for i in t["ids"]]
    assert len(seen) == len(set(seen)), "no sample of the interrupted epoch trained twice"
    assert set(seen) == run.partition_ids(epoch % 3), "the resumed attempt trained exactly the rest of the epoch"
    assert [int(r["epoch"]) for r in run.metrics()] == [0, 1, 2]

    # Resuming is exact: the same validation losses as a run that was never interrupted.
    assert [r["val_loss"] for r in run.metrics()] == [r["val_loss"] for r in uninterrupted.metrics()]


# The real launcher, with a signal sent to itself just before it (re)moves old checkpoints, or
# just as it starts the ranks' launcher: windows a scheduler's warning can hit, which no sleep
# or poll can aim at reliably.
SIGNAL_AT_START = """
import os, signal, subprocess, sys
from snakeddp import launch

signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as a terminal's shell starts it, whatever this test inherited

owner = {"prepare": launch.attempt, "Popen": subprocess}[sys.argv[2]]
real = getattr(owner, sys.argv[2])

def signalled(*args, **kwargs):
    os.kill(os.getpid(), int(sys.argv[1]))
    return real(*args, **kwargs)

setattr(owner, sys.argv[2], signalled)
sys.exit(launch.main(sys.argv[3:]))
"""


@pytest.mark.parametrize(
    ("signum", "at"),
    [(signal.SIGUSR1, "Popen"), (signal.SIGTERM, "Popen"), (signal.SIGHUP, "Popen"), (signal.SIGUSR1, "prepare")],
)
def test_preemption_signal_as_the_launcher_starts_the_ranks_stops_it_as_preempted(tmp_path, signum, at):
    """A scheduler's warning (SIGUSR1), SIGTERM, or a closed terminal's SIGHUP, which its shell sent the train job's
    process group (the launcher's, as the rule execs it): each stops the run as preempted, to resume."""
    run = Run(tmp_path, {"data": {"num_train_files": 2, "num_val_records": 50}, "trainer": {"max_epochs": 2}})
    argv = [sys.executable, "-c", SIGNAL_AT_START, str(int(signum)), at, *run.argv()[3:]]
    with run.log.open("a") as log:
        env = {k: v for k, v in subprocess_env().items() if k != handoff.SOCKET}  # its ranks its own, as Run.start's
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=300).returncode
    assert code == 75, run.log.read_text()[-3000:]
    assert not (run.dir / "provenance.json").exists()

    assert run.train(kept_warm=True) == 0, run.log.read_text()[-3000:]
    assert [int(r["epoch"]) for r in run.metrics()] == [0, 1]


# The real launcher as the train rule runs it (`python -m snakeddp.launch`, its first lines too), its signal sent by
# itself as it begins importing its own modules (psutil, the first): a closed terminal's or a scheduler's signal in
# the launcher's first tenths of a second, which no sleep can aim at.
SIGNAL_IN_IMPORTS = """
import os, runpy, signal, sys

signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as a terminal's shell starts it, whatever this test inherited
signum = int(sys.argv.pop(1))
sent = []

def signalled(event, args):
    if event == "import" and args[0] == "psutil" and not sent:
        sent.append(signum)
        os.kill(os.getpid(), signum)

sys.addaudithook(signalled)
runpy.run_module("snakeddp.launch", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_a_stop_while_the_launcher_imports_is_recorded_as_preempted_and_named(tmp_path, signum):
    """A closed terminal's SIGHUP, or a SIGTERM, while the launcher still imports (no handler of its own yet): the
    try is recorded as preempted and the launcher exits 75, as a stop a moment later does; its line names the
    signal that came (the SIGTERM a SIGHUP stands for is what the ranks would have been sent)."""
    run = Run(tmp_path, {"data": {"num_train_files": 2, "num_val_records": 50}, "trainer": {"max_epochs": 2}})
    argv = [sys.executable, "-c", SIGNAL_IN_IMPORTS, str(int(signum)), *run.argv()[3:]]
    env = {k: v for k, v in subprocess_env().items() if k != handoff.SOCKET}  # a cold job, as Run.start's
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, preexec_fn=as_typed_in_a_terminal)
    assert done.returncode == 75, done.stdout + done.stderr
    said = f"snakeddp.launch: {signal.Signals(signum).name} before the ranks started; not starting them."
    assert said in done.stdout.splitlines(), done.stdout + done.stderr
    assert json.loads((run.dir / "tries.json").read_text())["tries"][-1]["outcome"] == "preempted"
    assert not (run.dir / "provenance.json").exists()


def test_a_closed_terminal_stops_a_cold_torchrun_job_with_a_mid_epoch_save(tmp_path):
    """`launch.launcher: torchrun`, the job started cold (`SNAKEDDP_WARM_START=0`, `--sdm conda`), its terminal
    closed: the shell hangs up the job's whole process group, `bash -c PREFIX COMMAND` as Snakemake runs it. The
    launcher takes the SIGHUP as SIGTERM and sends it to torchrun's workers, which save where they stopped; torchrun's
    agent, in a session of its own, is not hung up (it used to end the workers with SIGHUP first: no save mid-epoch)."""
    config = slow_config(SIGNALLED_RECORDS, max_epochs=3)
    config["launch"]["launcher"] = "torchrun"
    run = Run(tmp_path, config)
    env = {k: v for k, v in subprocess_env(SNAKEDDP_WARM_START="0").items() if k != handoff.SOCKET}
    command = f"{interrupt.JOB_SHELL_PREFIX}{shlex.join(run.argv())} > {shlex.quote(str(run.log))} 2>&1"
    job = subprocess.Popen(["bash", "-c", command], env=env, start_new_session=True, preexec_fn=as_typed_in_a_terminal)
    run.wait_for_epochs(job, 1)
    time.sleep(0.5)
    os.killpg(job.pid, signal.SIGHUP)
    assert job.wait(timeout=300) == 75, run.log.read_text()[-3000:]
    assert "preempted in epoch" in run.log.read_text()
    assert json.loads((run.dir / "tries.json").read_text())["tries"][-1]["outcome"] == "preempted"
    assert {t["rank"] for t in run.traces() if not t["complete"]} == {0, 1}, "both ranks saved mid-epoch"


def rank_pids(run_dir: Path) -> dict[int, int]:
    """{rank: pid} of the training processes of one run directory, from /proc.

    A cold rank's /proc environ names its RANK. A rank forked by the supervisor shows the supervisor's
    command line and environment (what exec() set; its os.environ is its own): those are the
    supervisor's children among the processes of the run, forked in rank order.
    """
    pids, unnamed = {}, {}
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            env = dict(item.split(b"=", 1) for item in (proc / "environ").read_bytes().split(b"\0") if b"=" in item)
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"snakeddp.train" in argv and str(run_dir).encode() in argv:
            if b"RANK" in env:
                pids[int(env[b"RANK"])] = int(proc.name)
            else:
                unnamed[int(proc.name)] = parent
    forked = sorted(pid for pid, parent in unnamed.items() if parent in unnamed)
    pids.update(enumerate(forked))
    return pids


@pytest.mark.parametrize("rank", [0, 1])
def test_sigterm_on_one_rank_stops_every_rank_at_the_same_step(tmp_path, rank):
    # Lightning's per-step SIGTERM broadcast is off (snakeddp.compat.lightning); the deadlock it
    # guarded against (Lightning issue #20806: one rank stops, the other waits in a collective)
    # must still not happen when only one rank is signalled.
    run = Run(tmp_path, slow_config(SIGNALLED_RECORDS, max_epochs=3))
    process = run.start()
    run.wait_for_epochs(process, 1)
    pids = rank_pids(run.dir)
    assert set(pids) == {0, 1}, pids
    time.sleep(0.5)
    os.kill(pids[rank], signal.SIGTERM)
    # No deadlock: the run ends well within the timeout, preempted (both ranks saved and exit 75;
    # torchrun's agent reported 75 or 1 here, depending on which rank exited first).
    assert process.wait(timeout=120) == 75, run.log.read_text()[-3000:]
    assert "preempted in epoch" in run.log.read_text()
    batch = run.config["trainer"]["batch_size"]
    # Steps each rank trained in the interrupted epoch (a rank's last batch may be one sample short).
    steps = {t["rank"]: -(-len(t["ids"]) // batch) for t in run.traces() if not t["complete"]}
    assert set(steps) == {0, 1}, "both ranks stopped mid-epoch"
    assert steps[0] == steps[1], f"steps trained in the interrupted epoch per rank: {steps}"
    assert run.train(kept_warm=True) == 0, run.log.read_text()[-3000:]
    assert [int(r["epoch"]) for r in run.metrics()] == [0, 1, 2]


@pytest.mark.parametrize("damage", ["flip", "pickle"])
def test_damaged_partition_stops_training_by_name(tmp_path, damage):
    run = Run(
        tmp_path,
        {
            "data": {"num_train_files": 2, "num_records_per_train_file": 200, "num_val_records": 50, "num_features": 4},
            "trainer": {"max_epochs": 2},
        },
    )
    target = run.manifest.parent / "train/part-00001.safetensors"
    marker = tmp_path / "executed"
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[-1] ^= 0x01
        target.write_bytes(bytes(data))
    else:

        class Exploit:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))

        target.write_bytes(pickle.dumps({"features": Exploit()}))
    assert run.train(kept_warm=True) != 0
    log = run.log.read_text()
    assert "part-00001.safetensors" in log and "checksum mismatch" in log
    assert not (run.dir / "provenance.json").exists()
    assert not marker.exists()
