"""Ctrl-C during `snakemake --profile profiles/local > run.log 2>&1`, typed in a checkout (or SIGINT to
Snakemake's process alone): a handful of lines, one saying that rerunning resumes, no traceback, every
epoch line whole; the rerun resumes and the interrupted attempt's log is kept beside the new one."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from snakeddp.run.variables import WARM_START
from snakeddp.workflow.interrupt import JOB_SHELL_PREFIX
from tests import workflow_venv
from tests.checkout import Checkout, local_run_past_first_checkpoint
from tests.helpers import as_typed_in_a_terminal, left_running, subprocess_env, training_processes

pytestmark = pytest.mark.e2e

# Enough steps per epoch that Ctrl-C lands mid-training, after the first epoch is saved.
SLOW = {
    "data": {"num_train_files": 3, "num_records_per_train_file": 6001, "num_val_records": 500, "num_features": 16},
    "model": {"hidden_sizes": [32]},
    "trainer": {"max_epochs": 4, "batch_size": 16, "early_stopping": {"enabled": False}},
    "launch": {"mem_mb": 1000, "runtime": 10},
}


def metrics_rows(run_dir: Path) -> list[str]:
    """metrics.csv's rows as written (one line an epoch, its timings included), header left out."""
    path = run_dir / "metrics.csv"
    return path.read_text().splitlines()[1:] if path.is_file() else []


def assert_resumed(log: str, before: list[str], after: list[str]) -> None:
    """The rerun went on from the saved epoch: training's own first line says which (a rerun from
    scratch says epoch 1), the rows of the epochs it did not redo are the interrupted attempt's,
    byte for byte (their timings differ on a rerun from scratch), and every epoch is there once."""
    (started,) = re.findall(r"^base: training from epoch (\d+)/4 on ", log, flags=re.M)
    first = int(started)
    assert first > 1, f"the rerun trained from scratch: {log}"
    kept = [row for row in before if int(row.split(",")[0]) < first - 1]
    assert kept and after[: len(kept)] == kept, (before, after)
    assert [int(row.split(",")[0]) for row in after] == [0, 1, 2, 3]


def test_sigint_to_snakemake_alone_stops_its_ranks_says_how_to_resume_in_a_few_lines_and_the_rerun_resumes(
    tmp_path,
):
    """SIGINT to Snakemake's pid alone (`kill -INT PID`, a CI runner's stop): unlike a terminal's Ctrl-C, which
    signals its foreground process group, every job Snakemake started, it reaches no job but by Snakemake's
    relay (snakeddp.workflow.interrupt), which a terminal's Ctrl-C leaves its jobs' clients to ignore
    (tests/warm/test_jobs.py). The rest is as after Ctrl-C: Snakemake's local executor would wait for the run
    to finish training."""
    checkout = Checkout(tmp_path)
    checkout.write_config(SLOW)
    run_dir = tmp_path / "results/runs/base"
    # Its output goes to a file opened as `>` opens it (no O_APPEND), where a second writer's
    # lines would overwrite Snakemake's (snakeddp.util.terminal).
    with open(tmp_path / "run.log", "w") as run_log:
        typed = subprocess.Popen(
            [workflow_venv.snakemake(), "--profile", "profiles/local"],
            cwd=tmp_path,
            env=subprocess_env(),
            stdout=run_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=as_typed_in_a_terminal,
        )
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints/last.ckpt").is_file():
        assert typed.poll() is None and time.monotonic() < deadline, "training never saved an epoch"
        time.sleep(0.2)
    ranks = training_processes(run_dir)
    assert ranks, "the run's ranks are not training"
    os.kill(typed.pid, signal.SIGINT)
    _, alive = psutil.wait_procs(ranks, timeout=30)
    assert not alive, "SIGINT to Snakemake alone left the run's ranks training"
    typed.wait(timeout=120)
    output = (tmp_path / "run.log").read_text()
    assert typed.returncode == 1, output
    assert not left_running(tmp_path, within=5), "a process of the interrupted run is still there"
    # Stopped, not finished: recorded as Ctrl-C leaves it.
    assert not (run_dir / "provenance.json").exists(), output
    assert json.loads((run_dir / "tries.json").read_text())["tries"][-1]["outcome"] == "interrupted"

    after = output.split("Terminating processes on user request, this might take some time.\n")[1].splitlines()
    assert len(after) <= 5, output
    assert after[0].startswith("Interrupted (Ctrl-C). Nothing is lost: rerun the same command"), output
    assert "  run base: its last finished epoch is saved in results/runs/base/checkpoints/last.ckpt" in after
    for crash in ("Traceback", "RuleException", "Error in rule", "WorkflowError", "CalledProcessError"):
        assert crash not in output, output
    interrupted_log = (tmp_path / "logs/train/base.log").read_text()
    assert "Detected KeyboardInterrupt" in interrupted_log
    # The epochs the run said before Ctrl-C, each whole and once (one said while Snakemake was
    # ending stays in the log only).
    said = [line for line in interrupted_log.splitlines() if line.startswith("base: epoch ")]
    shown = [line for line in output.splitlines() if re.search(r"epoch \d+/\d+  ", line)]
    assert shown and shown == said[: len(shown)], output

    before = metrics_rows(run_dir)
    rerun = checkout.snakemake("--profile", "profiles/local")
    assert rerun.returncode == 0, rerun.stdout
    assert_resumed((tmp_path / "logs/train/base.log").read_text(), before, metrics_rows(run_dir))
    # Both attempts' jobs and ranks were forked from the warm process of their invocation.
    launch = json.loads((run_dir / "provenance.json").read_text())["launch"]
    assert (launch["job_start"], launch["rank_start"]) == ("warm", "warm")
    (kept,) = (tmp_path / "logs/train").glob("base.2*.log")
    assert kept.read_text() == interrupted_log


def test_kill_9_of_snakemake_leaves_no_process_behind_sighup_leaves_no_lock_and_each_rerun_resumes(tmp_path):
    """Snakemake killed outright cannot clean up: its warm process notices (PR_SET_PDEATHSIG), stops
    the jobs it forked (SIGTERM: training saves, then SIGKILL) and exits; the clients follow. SIGHUP to
    Snakemake alone (a closed terminal or ssh session) stops it as SIGTERM does: its jobs, here started
    cold, stopped and recorded through Snakemake's relay (snakeddp.util.relays), its lock released, and the
    terminal says so in as few lines as after Ctrl-C, not as a crash."""
    checkout = Checkout(tmp_path)
    checkout.write_config(SLOW)
    run_dir = tmp_path / "results/runs/base"
    typed = local_run_past_first_checkpoint(tmp_path, tmp_path / "run.log")
    typed.kill()
    typed.wait()
    assert not left_running(tmp_path, within=10), "a process of the killed run is still there"
    assert not list(Path(tempfile.gettempdir()).glob(f"snakeddp-warm-{typed.pid}-*"))
    # Snakemake's own lock outlives a kill -9: it says to --unlock, as after any such kill.
    assert checkout.snakemake("--profile", "profiles/local", "--unlock").returncode == 0

    hung_up = sighup_once_training_resumed(tmp_path, run_dir)
    output = (tmp_path / "hup.log").read_text()
    assert hung_up.returncode == 1, output
    assert not left_running(tmp_path, within=10), "a process of the hung-up run is still there"
    assert not list((tmp_path / ".snakemake/locks").glob("*")), output  # Snakemake removes its lock on the way out
    assert json.loads((run_dir / "tries.json").read_text())["tries"][-1]["outcome"] == "preempted", output
    after = output.split("Shutting down, this might take some time.\n")[1].splitlines()
    assert len(after) <= 5, output
    assert after[0].startswith("Stopped (SIGHUP). Nothing is lost: rerun the same command"), output
    assert "  run base: its last save is in results/runs/base/checkpoints/last.ckpt" in after, output
    for crash in ("Traceback", "RuleException", "Error in rule", "WorkflowError", "Will exit after finishing"):
        assert crash not in output, output
    before = metrics_rows(run_dir)
    rerun = checkout.snakemake("--profile", "profiles/local")
    assert rerun.returncode == 0, rerun.stdout
    # The rerun went on from the saved epoch: every epoch once, none repeated, none missing.
    assert_resumed((tmp_path / "logs/train/base.log").read_text(), before, metrics_rows(run_dir))
    # Both attempts' jobs and ranks were forked from the warm process of their invocation.
    launch = json.loads((run_dir / "provenance.json").read_text())["launch"]
    assert (launch["job_start"], launch["rank_start"]) == ("warm", "warm")


def sighup_once_training_resumed(checkout: Path, run_dir: Path) -> subprocess.Popen:
    """`snakemake --profile profiles/local`, every job started cold, sent SIGHUP alone once its train job resumed
    training; returned once it has ended, after its ranks."""
    with open(checkout / "hup.log", "w") as hup_log:
        hung_up = subprocess.Popen(
            [workflow_venv.snakemake(), "--profile", "profiles/local"], cwd=checkout,
            env=subprocess_env(**{WARM_START: "0"}), stdout=hup_log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=as_typed_in_a_terminal,
        )  # fmt: skip
    train_log = checkout / "logs/train/base.log"  # the killed attempt's moved aside first
    deadline = time.monotonic() + 300
    while not (train_log.is_file() and re.search(r"^base: training from epoch [2-9]/", train_log.read_text(), re.M)):
        assert hung_up.poll() is None and time.monotonic() < deadline, "the rerun never resumed training"
        time.sleep(0.2)
    ranks = training_processes(run_dir)
    # The train job's shell keeps through a hang-up of its group (tests/workflow/test_interrupt.py) by its prefix.
    shells = [" ".join(p.cmdline()) for p in psutil.Process(hung_up.pid).children(recursive=True) if p.name() == "bash"]
    assert any(f" -c {JOB_SHELL_PREFIX} python -m snakeddp.launch " in shell for shell in shells), shells
    os.kill(hung_up.pid, signal.SIGHUP)
    _, alive = psutil.wait_procs(ranks, timeout=30)
    assert not alive, "SIGHUP to Snakemake alone left its cold job training"
    hung_up.wait(timeout=120)
    return hung_up
