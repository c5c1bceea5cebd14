"""`snakemake --profile spark` against a real standalone Spark cluster on this machine: two ranks
across the two workers, the same weights as the direct launcher, a killed executor in one line and
a rerun that resumes, and the HINT-able failures before any rank starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import torch

from scripts.spark_cluster import Cluster, daemon_env, executors
from snakeddp.util import terminal
from tests.helpers import SPARK_CONF_SECRETS, TINY, Workflow, subprocess_env
from tests.platforms.conformance import Conformance, Finished

pytestmark = [pytest.mark.e2e, pytest.mark.dev_venv]  # the spark profile's driver imports pyspark

TWO_RANKS = {**TINY, "trainer": {**TINY["trainer"], "max_epochs": 2}, "launch": {**TINY["launch"], "devices": 2}}


def spark_env(cluster: Cluster, **extra: str) -> dict[str, str]:
    return subprocess_env(**cluster.env(), **extra)


def flow_in(directory: Path, config: dict, profile: str = "spark") -> Workflow:
    directory.mkdir(parents=True, exist_ok=True)
    flow = Workflow(directory, profile=profile)
    flow.write_config(config)
    return flow


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]


def train_jobs(snakemake: int) -> list[psutil.Process]:
    """The `python -m snakeddp.launch` processes under Snakemake (its short-lived children may be zombies)."""
    found = []
    for process in psutil.Process(snakemake).children(recursive=True):
        try:
            if "snakeddp.launch" in process.cmdline():
                found.append(process)
        except psutil.Error:
            continue
    return found


def hint_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "HINT:" in line]


@dataclass
class Resumed:
    """One run, killed mid-training (an executor lost), rerun and preempted (SIGTERM to its train job), rerun to
    the end, then the same command again; and the direct launcher's uninterrupted run of the same config."""

    flow: Workflow
    killed: tuple[int, str]  # Snakemake's exit status and the train log
    preempted: tuple[int, str]
    done_epochs: int  # before the last rerun
    done: subprocess.CompletedProcess
    rerun_s: float
    again: subprocess.CompletedProcess
    direct: Workflow
    direct_s: float


def test_the_clusters_daemons_run_on_the_jits_first_tier_and_the_serial_collector(spark_cluster: Cluster, monkeypatch):
    """The master and the workers as they run (their JVMs' argv), and a collector or JIT tier a user exports
    standing over ours; their temporary folders in the cluster's directory, not /tmp (a JVM killed left its
    spark-* folder there)."""
    assert set(spark_cluster.pids) == {"master", "worker-1", "worker-2"}
    tmpdir = f"-Djava.io.tmpdir={spark_cluster.directory / 'tmp'}".encode()
    for name, pid in spark_cluster.pids.items():
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"-XX:TieredStopAtLevel=1" in argv and b"-XX:+UseSerialGC" in argv and tmpdir in argv, (name, argv)
    monkeypatch.setenv("SPARK_DAEMON_JAVA_OPTS", "-XX:+UseG1GC -Dsite=x")
    assert daemon_env(spark_cluster)["SPARK_DAEMON_JAVA_OPTS"] == (
        f"-XX:TieredStopAtLevel=1 -XX:+UseG1GC -Dsite=x {tmpdir.decode()}"
    )


@pytest.fixture(scope="module")
def resumed(spark_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Resumed:
    # Epochs of about a second, so that an executor dies mid-training after last.ckpt has been written.
    config = {**TWO_RANKS, "data": {**TINY["data"], "num_records_per_train_file": 30000}}
    config["trainer"] = {**TINY["trainer"], "max_epochs": 6}
    config["spark"] = {"conf": SPARK_CONF_SECRETS}
    root = tmp_path_factory.mktemp("spark-profile")
    flow = flow_in(root / "spark", config)
    env = spark_env(spark_cluster)
    metrics = flow.directory / "results/runs/base/metrics.csv"
    command = flow.command()
    with subprocess.Popen(
        command, cwd=flow.directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as snakemake:
        deadline = time.monotonic() + 300
        while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
            assert snakemake.poll() is None, snakemake.stdout.read().decode()
            assert time.monotonic() < deadline, "no second epoch in 300 s"
            time.sleep(0.2)
        victims = executors(spark_cluster)
        assert len(victims) == 2, victims
        os.kill(victims[1], signal.SIGKILL)
        snakemake.communicate(timeout=120)
    killed = (snakemake.returncode, (flow.directory / "logs/train/base.log").read_text())
    done_epochs = len(metrics.read_text().splitlines()) - 1

    # What the HINT says: rerun the same command. It is preempted in its turn (SIGTERM to the train job,
    # as a scheduler sends): the driver cannot signal ranks on other machines, so they stop on its stop file.
    with subprocess.Popen(
        command, cwd=flow.directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as snakemake:
        deadline = time.monotonic() + 300
        while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= done_epochs + 2):
            assert snakemake.poll() is None, snakemake.stdout.read().decode()
            assert time.monotonic() < deadline, "no epoch after the resume in 300 s"
            time.sleep(0.2)
        train_job = train_jobs(snakemake.pid)
        assert len(train_job) == 1, train_job
        train_job[0].send_signal(signal.SIGTERM)
        snakemake.communicate(timeout=120)
    preempted = (snakemake.returncode, (flow.directory / "logs/train/base.log").read_text())
    done_epochs = len(metrics.read_text().splitlines()) - 1

    started = time.perf_counter()
    done = flow.run(env=env)
    rerun_s = time.perf_counter() - started
    again = flow.run(env=env)
    direct = flow_in(root / "direct", config, profile="local")
    started = time.perf_counter()
    direct.run(env=subprocess_env())
    return Resumed(flow, killed, preempted, done_epochs, done, rerun_s, again, direct, time.perf_counter() - started)


def test_two_ranks_across_the_two_workers_a_killed_executor_a_rerun_with_the_direct_launchers_weights_no_key_kept(
    spark_cluster: Cluster, resumed: Resumed
):
    """One run, to keep the suite short (a session starts in 13-38 s here): killed mid-training, resumed,
    and then the same weights as the direct launcher's uninterrupted run of the same config; the storage
    keys in its spark.conf reach nothing it writes or prints."""
    flow, done = resumed.flow, resumed.done
    run_dir = flow.directory / "results/runs/base"
    code, log = resumed.killed
    assert code != 0
    lines = hint_lines(log)
    assert len(lines) == 1, log[-4000:]
    assert "Spark executor" in lines[0] and "was lost mid-training" in lines[0]
    assert "the run resumes from its newest checkpoint" in lines[0]
    assert "Traceback" not in log and "Py4JJavaError" not in log, log[-4000:]
    code, log = resumed.preempted
    assert code != 0 and "snakeddp: preempted in epoch" in log and "rerun to resume" in log, log[-3000:]

    leaked = [(str(path), value) for top in ("results", "logs", ".snakemake")
              for path in (flow.directory / top).rglob("*") if path.is_file()
              for value in SPARK_CONF_SECRETS.values() if value.encode() in path.read_bytes()]  # fmt: skip
    leaked += [("terminal", value) for value in SPARK_CONF_SECRETS.values() if value in done.stdout + done.stderr]
    assert not leaked
    record = json.loads((run_dir / "provenance.json").read_text())
    assert record["training"]["resumed_from"]["path"] == "checkpoints/last.ckpt", record["training"]["resumed_from"]
    assert record["training"]["epochs_completed"] == 6
    rerun = (flow.directory / "logs/train/base.log").read_text()
    assert "resuming from" in rerun and f"training from epoch {resumed.done_epochs + 1}/6" in rerun, rerun[-3000:]

    launch = record["launch"]
    assert launch["launcher"] == "torchdistributor" and launch["world_size"] == 2
    spark = launch["spark"]
    assert spark["application_id"].startswith("app-") and launch["job_id"] == spark["application_id"]
    assert spark["master"] == spark_cluster.master_url
    # One rank in each of two executor processes, each on its own 1-core worker.
    assert sorted(e["rank"] for e in spark["executors"]) == [0, 1]
    assert len({e["id"] for e in spark["executors"]}) == 2 and len({e["pid"] for e in spark["executors"]}) == 2
    assert {e["host"] for e in spark["executors"]} == {"127.0.0.1"}
    assert [e["gpus"] for e in spark["executors"]] == [[], []], "each rank recorded its task's (no) GPUs"
    assert f"application {spark['application_id']} on {spark_cluster.master_url}" in rerun
    assert (flow.directory / "results/report/report.html").is_file()
    assert not (run_dir / "spark").exists(), "the driver's scratch (TMPDIR, spark.local.dir) leaves with it"

    ours, theirs = weights(run_dir), weights(resumed.direct.directory / "results/runs/base")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours), "spark and direct trained different weights"
    print(
        f"rerun with --profile spark: {resumed.rerun_s:.1f} s; "
        f"the whole run with --profile local (direct): {resumed.direct_s:.1f} s"
    )


def test_auto_is_what_the_workers_offer_without_a_declaration(spark_cluster: Cluster, tmp_path):
    """The profile declares nothing: the master says its two workers offer no GPUs, so auto is cpu, in one line
    (tests/spark/test_spark_gpu.py: a worker offering GPUs, gpu)."""
    flow = Workflow(tmp_path, profile="spark")
    flow.write_config({**TINY, "launch": {**TINY["launch"], "accelerator": "auto"}})
    done = flow.run("-n", env=subprocess_env(**spark_cluster.env()))
    decided = [line for line in done.stderr.splitlines() if "launch.accelerator auto on Spark" in line]
    assert decided == [
        "snakeddp: launch.accelerator auto on Spark means cpu (the master at 127.0.0.1:"
        f"{spark_cluster.ui_port} says: 2 workers alive, none offering GPUs)."
    ], done.stderr[-3000:]
    # The master named by $MASTER alone: its web UI is not at Spark's 8080 (the cluster's conf says where), and
    # that is the line, not "the profile does not say what its nodes have".
    bare = {k: v for k, v in subprocess_env().items() if k != "SPARK_CONF_DIR"}
    refused = flow.run("-n", check=False, env={**bare, "MASTER": spark_cluster.master_url})
    lines = [line for line in (refused.stdout + refused.stderr).splitlines() if "HINT:" in line]
    assert refused.returncode != 0 and len(lines) == 1, refused.stdout + refused.stderr
    assert "the Spark master's web UI at 127.0.0.1:8080 did not answer" in lines[0], lines[0]
    assert "HINT: export the SPARK_CONF_DIR the cluster's start printed" in lines[0]


@dataclass
class Refusals:
    """Dry runs refused before any rank in one workflow, by case: what the line must say, and the invocation."""

    flow: Workflow
    cases: dict[str, tuple[str, subprocess.CompletedProcess]]


@pytest.fixture(scope="module")
def refusals(spark_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Refusals:
    root = tmp_path_factory.mktemp("spark-hints")
    flow = flow_in(root / "hints", TWO_RANKS)
    dead = root / "dead-conf"
    dead.mkdir()
    (dead / "spark-defaults.conf").write_text("spark.master spark://127.0.0.1:9\n")
    cases = {
        "no master": ({"SPARK_CONF_DIR": str(dead)}, "no Spark master answers at spark://127.0.0.1:9"),
        "no master named": ({"SPARK_CONF_DIR": str(root)}, "the spark profile found no Spark master"),
        "no JDK": ({**spark_cluster.env(), "JAVA_HOME": str(root)}, "has no bin/java"),
    }
    refused = {name: (expected, flow.run("-n", check=False, env=subprocess_env(**extra)))
               for name, (extra, expected) in cases.items()}  # fmt: skip
    return Refusals(flow, refused)


@pytest.fixture(scope="module")
def finished(resumed: Resumed, refusals: Refusals) -> Finished:
    return Finished(resumed.flow.directory, resumed.again, refusals.cases["no master"][1])


class TestSparkConformance(Conformance):
    platform = "spark"
    refused_says = "no Spark master answers at spark://127.0.0.1:9"


def test_failures_before_any_rank_are_one_line_with_a_hint_that_works(spark_cluster: Cluster, refusals: Refusals):
    for name, (expected, done) in refusals.cases.items():
        lines = hint_lines(done.stdout + done.stderr)
        assert done.returncode != 0 and len(lines) == 1 and expected in lines[0], (name, done.stderr[-3000:])
    # The HINTs: export the SPARK_CONF_DIR of a running cluster (or name it in spark.master), unset JAVA_HOME.
    flow = refusals.flow
    fixed = {k: v for k, v in spark_env(spark_cluster).items() if k != "JAVA_HOME"}
    assert flow.run("-n", env=fixed).returncode == 0
    named = flow.run("-n", "--config", f"spark={{master: {spark_cluster.master_url}}}", env=subprocess_env())
    assert named.returncode == 0


def working_in(directory: Path) -> list[str]:
    """The processes working in ``directory`` (a workflow's: Snakemake, its Spark application and that one's
    JVM, the train jobs and their drivers, the ranks, which work where the driver does)."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "cwd"]):
        if process.info["cwd"] and Path(process.info["cwd"]).is_relative_to(directory):
            found.append(f"{process.info['pid']}: {' '.join(process.info['cmdline'] or ())[:160]}")
    return found


def test_a_sweep_trains_in_one_application_a_run_too_large_fails_alone_and_kill_9_leaves_nothing(
    spark_cluster, tmp_path
):
    """The spark profile's runs share the workflow's one Spark application (one session for a sweep). A run
    that needs more task slots than the cluster has fails in seconds in one line, alone: the other trains
    in the same application and keeps its results. Then `kill -9` of Snakemake mid-training leaves no
    process behind: the application, its JVM, the cluster's executors for it, the train jobs and ranks."""
    config = {**TWO_RANKS, "sweep": {"launch.devices": [2, 3]}}
    flow = flow_in(tmp_path / "sweep", config)
    env = spark_env(spark_cluster)
    started = time.perf_counter()
    done = flow.run(check=False, env=env)
    seconds = time.perf_counter() - started
    runs = flow.directory / "results/runs"
    log = (flow.directory / "logs/train/devices-3.log").read_text()
    lines = hint_lines(log)
    assert done.returncode != 0 and len(lines) == 1, log[-4000:]
    assert "fewer free task slots than the run's 3 ranks" in lines[0]
    assert not (runs / "devices-3/metrics.csv").exists(), "no rank of the 3-rank run started"
    # Spark's default would wait 15 s x 40 checks; here: the session's wait for executors and 3 checks.
    assert seconds < 150, seconds
    record = json.loads((runs / "devices-2/provenance.json").read_text())
    app = record["launch"]["spark"]["application_id"]
    assert record["training"]["epochs_completed"] == 2
    assert f"application {app} on {spark_cluster.master_url}" in log, "both runs in the one application"
    assert "shared by the workflow's runs" in log
    # Its session, and the executors' Python, were started before the first train job asked: both runs ask
    # for the same one (snakeddp.spark.sharing.expected).
    ahead = (flow.directory / ".snakemake/snakeddp/spark-application.log").read_text()
    assert f"session {app} started in" in ahead and "before any run asked" in ahead, ahead[-3000:]
    assert "the executors' Python started in" in ahead
    # Its ranks were forked from their tasks' Python workers, which imported torch and Lightning before the
    # stage began (snakeddp.spark.daemon), in one barrier stage of the application.
    launch = record["launch"]
    assert launch["rank_start"] == "warm" and [r["start"] for r in launch["ranks"]] == ["warm", "warm"], launch
    assert isinstance(launch["spark"]["stage_id"], int)
    # Each run's ranks' lines come back to its own log, through the one application.
    trained = (flow.directory / "logs/train/devices-2.log").read_text()
    assert "devices-2: epoch 2/2" in trained and "devices-3:" not in trained, trained[-3000:]
    # And rank 0's epoch lines reach Snakemake's terminal too, through the run's driver job, once each; the log
    # has them as the rank said them (without the mark that told the driver so: snakeddp.util.terminal).
    shown = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("devices-2: epoch ")]
    assert [line.split(" ")[2] for line in shown] == ["1/2", "2/2"], done.stdout[-3000:]
    assert set(shown) <= set(trained.splitlines()) and terminal.MARK not in trained

    # What the HINT says, lowering the world size to the two slots there are, is the first test's run.
    # Killed: a run long enough to be mid-training (epochs of about a second).
    config = {**TWO_RANKS, "data": {**TINY["data"], "num_records_per_train_file": 30000}}
    config["trainer"] = {**TINY["trainer"], "max_epochs": 20}
    killed = flow_in(tmp_path / "killed", config)
    metrics = killed.directory / "results/runs/base/metrics.csv"
    with subprocess.Popen(
        killed.command(), cwd=killed.directory, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as snakemake:
        deadline = time.monotonic() + 300
        while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 2):
            assert snakemake.poll() is None and time.monotonic() < deadline, "no first epoch in 300 s"
            time.sleep(0.2)
        assert any("snakeddp.spark.application" in line for line in working_in(killed.directory))
        assert executors(spark_cluster)
        snakemake.kill()
        deadline = time.monotonic() + 60
        while (left := working_in(killed.directory)) or executors(spark_cluster):
            assert time.monotonic() < deadline, f"60 s after kill -9: {left}; executors {executors(spark_cluster)}"
            time.sleep(0.5)
    # Stopped as a preempted run is (its ranks saved last.ckpt at one step): a rerun resumes it.
    assert (killed.directory / "results/runs/base/checkpoints/last.ckpt").is_file()
    assert not list((killed.directory / ".snakemake/snakeddp").glob("spark-*/")), "its scratch left with it"
