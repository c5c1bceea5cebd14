"""`snakemake --profile profiles/slurm` against the real Slurm test cluster (tests/slurm/cluster.py).

The tests share one workflow directory, so the data and environment jobs run once (in the first
test) and later tests only train; each Snakemake invocation runs in a module fixture that the
tests checking its results share. Every job is a real sbatch job; its ranks are real srun or
mpirun processes on the two nodes (NODES), which share this machine's CPUs.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import ANY

import pytest
import yaml

from snakeddp.config import dataset_id, validate
from tests.cluster.refusal import torch_unimportable
from tests.platforms.conformance import Conformance, Finished
from tests.slurm.cluster import NODES
from tests.slurm.workflow import SlurmWorkflow, config, run_uuid

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

PROBE = Path(__file__).with_name("signal_probe.py")


def accounted_jobs(workflow: SlurmWorkflow, name: str | None = None) -> list[dict[str, str]]:
    """sacct's record of the jobs (allocations, not steps), optionally only those named ``name``."""
    fields = "JobID,JobName%60,State,ExitCode,NNodes,NCPUS,Comment%200,Start,End"
    argv = ["sacct", "--allocations", "--parsable2", f"--format={fields}", "--starttime=now-1days"]
    if name:
        argv.append(f"--name={name}")
    return list(csv.DictReader(io.StringIO(workflow.slurm(*argv)), delimiter="|"))


def job_rule(job: dict[str, str]) -> str:
    """The rule the plugin's --comment names (rule_<name>[_wildcards_<values>]); "data" for a bundle
    of profiles/slurm's data group (rule_data_<its rules>)."""
    name = job["Comment"].removeprefix("rule_").split("_wildcards_")[0]
    return "data" if name.startswith("data_data_") else name


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory, slurm_cluster) -> SlurmWorkflow:
    return SlurmWorkflow(tmp_path_factory.mktemp("slurm-workflow"), slurm_cluster)


def provenance(workflow: SlurmWorkflow, run: str) -> dict:
    return json.loads((workflow.directory / "results" / "runs" / run / "provenance.json").read_text())


def metrics_epochs(workflow: SlurmWorkflow, run: str) -> list[int]:
    lines = (workflow.directory / "results" / "runs" / run / "metrics.csv").read_text().splitlines()[1:]
    return [int(line.split(",")[0]) for line in lines]


def job_of_run(jobs: list[dict], run: str) -> dict:
    (job,) = [job for job in jobs if job["Comment"].endswith(f"_wildcards_{run}")]
    return job


def slurm_log(workflow: SlurmWorkflow, job_id: str) -> str:
    """A job's Slurm log: the output of the Snakemake that ran its rule inside the job."""
    return next((workflow.directory / ".snakemake" / "slurm_logs").rglob(f"{job_id}.log")).read_text()


def rule_log(workflow: SlurmWorkflow, run: str) -> str:
    return (workflow.directory / "logs" / "train" / f"{run}.log").read_text()


def assert_layout(record: dict, launcher: str, nodes: int, per_node: int) -> None:
    launch = record["launch"]
    assert (launch["launcher"], launch["nodes"], launch["processes_per_node"], launch["world_size"]) == (
        launcher,
        nodes,
        per_node,
        nodes * per_node,
    )
    ranks = sorted(launch["ranks"], key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == list(range(nodes * per_node))
    # Ranks fill nodes in order; SLURMD_NODENAME tells the fake nodes apart on one host.
    assert [r["node_rank"] for r in ranks] == [i // per_node for i in range(nodes * per_node)]
    assert [r["node"] for r in ranks] == [NODES[i // per_node] for i in range(nodes * per_node)]
    assert launch["nodes_seen"] == list(NODES[:nodes])
    assert launch["variables"]["SLURM_JOB_ID"] == launch["job_id"]
    assert launch["rank_start"] == "cold"  # srun and mpirun start every rank themselves: nothing forks them


@dataclass
class Pipeline:
    """The first invocation (every stage as Slurm jobs, two runs with srun ranks), its jobs, the same command
    again with the jobs the cluster had accounted before it, and a run too large for any node, refused."""

    done: subprocess.CompletedProcess
    jobs: list[dict[str, str]]
    again: subprocess.CompletedProcess
    before_again: set[str]
    refused: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def pipeline(workflow: SlurmWorkflow) -> Pipeline:
    workflow.write_config(config(launch={"devices": 2}, sweep={"launch.nodes": [1, 2]}))
    done = workflow.run()
    jobs = accounted_jobs(workflow, run_uuid(done.stdout + done.stderr))
    before = {job["JobID"] for job in accounted_jobs(workflow)}
    again = workflow.run()
    refused = workflow.run("--config", "launch={devices: 8}", check=False)
    return Pipeline(done, jobs, again, before, refused)


@pytest.fixture(scope="module")
def finished(workflow: SlurmWorkflow, pipeline: Pipeline) -> Finished:
    return Finished(workflow.directory, pipeline.again, pipeline.refused)


def test_pipeline_runs_every_stage_as_slurm_jobs_with_srun_ranks(workflow: SlurmWorkflow, pipeline: Pipeline):
    jobs = pipeline.jobs

    # Partitions and validation set are one bundle, each stage's environment record (data, train,
    # report) one job, the report one job; run configs and the manifest are local rules.
    assert sorted((job_rule(job), job["State"]) for job in jobs) == [
        ("data", "COMPLETED"),
        *[("env_capture", "COMPLETED")] * 3,
        ("report", "COMPLETED"),
        ("train", "COMPLETED"),
        ("train", "COMPLETED"),
    ]
    for job in jobs:
        assert "steps (100%) done" in slurm_log(workflow, job["JobID"])
    for run, nodes in (("nodes-1", 1), ("nodes-2", 2)):
        record, job = provenance(workflow, run), job_of_run(jobs, run)
        assert_layout(record, "srun", nodes=nodes, per_node=2)
        assert record["launch"]["job_id"] == job["JobID"]
        assert job["NNodes"] == str(nodes) and job["NCPUS"] == str(2 * nodes)
        assert f"run {run} on slurm via srun" in rule_log(workflow, run)
        # What Slurm told rank 0 about the allocation is recorded alongside the resolved layout.
        variables = record["launch"]["variables"]
        assert variables["SLURM_JOB_NODELIST"].split(",") == list(NODES[:nodes])
        assert variables["SLURM_NTASKS_PER_NODE"] == "2"
        # The ranks are one srun step of 2 x nodes tasks (Snakemake stays in the batch step).
        assert [(step["JobName"], step["NTasks"]) for step in steps(workflow, job["JobID"])] == [
            ("batch", "1"),
            ("python", str(2 * nodes)),
        ]
    assert len((workflow.directory / "results" / "report" / "runs.csv").read_text().splitlines()) == 3

    # No job at all is submitted the second time (the cluster's accounting also holds other tests' jobs);
    # that it had nothing to do is the conformance checks'.
    assert {job["JobID"] for job in accounted_jobs(workflow)} == pipeline.before_again


class TestSlurmConformance(Conformance):
    platform = "slurm"
    refused_says = "no node of Slurm partition"
    node_variable = "SLURMD_NODENAME"


def steps(workflow: SlurmWorkflow, job_id: str) -> list[dict[str, str]]:
    out = workflow.slurm("sacct", "--jobs", job_id, "--parsable2", "--format=JobID,JobName,NNodes,NTasks,State")
    return [row for row in csv.DictReader(io.StringIO(out), delimiter="|") if "." in row["JobID"]]


# Five partitions, made by the mpirun sweep's invocation two to a Slurm job (as profiles/slurm's group-components
# bundles 50): with its runs, one invocation fewer; five, not twenty ten to a bundle, since a bundle runs its rules one
# after another (twenty took 129 s of the file's 742 under load 9-12, Nov 28).
MANY = {"num_train_files": 5, "num_records_per_train_file": 50, "num_val_records": 50, "seed": 40}
BUNDLE = 2


@pytest.fixture(scope="module")
def mpirun_and_a_bad_run(workflow: SlurmWorkflow):
    """One sweep, two runs over two nodes on five partitions made by the same invocation, two to a bundle:
    mpirun trains; torchrun cannot span nodes and fails."""
    launch, sweep = {"nodes": 2, "devices": 1}, {"launch.launcher": ["mpirun", "torchrun"]}
    workflow.write_config(config(data=MANY, launch=launch, sweep=sweep))
    done = workflow.run("--keep-going", "--retries", "0", "--group-components", f"data={BUNDLE}", check=False)
    output = done.stdout + done.stderr
    return done.returncode, output, accounted_jobs(workflow, run_uuid(output))


def test_mpirun_trains_across_two_nodes(workflow: SlurmWorkflow, mpirun_and_a_bad_run):
    _, _, jobs = mpirun_and_a_bad_run
    job = job_of_run(jobs, "launcher-mpirun")
    assert job["State"] == "COMPLETED"
    record = provenance(workflow, "launcher-mpirun")
    assert_layout(record, "mpirun", nodes=2, per_node=1)
    assert record["launch"]["job_id"] == job["JobID"]
    assert "--mca ras_base_launch_orted_on_hn 1" in record["launch"]["command"]
    assert record["training"]["epochs_completed"] == 3
    # OpenMPI started one daemon per node as an srun step, and the ranks under them.
    assert [(step["JobName"], step["NNodes"]) for step in steps(workflow, job["JobID"])] == [
        ("batch", "1"),
        ("orted", "2"),
    ]


def test_a_failing_run_fails_its_job_and_the_sweep_goes_on(workflow: SlurmWorkflow, mpirun_and_a_bad_run):
    returncode, output, jobs = mpirun_and_a_bad_run
    assert returncode != 0 and "Error in rule train" in output
    assert job_of_run(jobs, "launcher-torchrun")["State"] == "FAILED"
    assert "torchrun from snakeddp.launch starts processes on this machine only" in rule_log(
        workflow, "launcher-torchrun"
    )
    assert not (workflow.directory / "results" / "runs" / "launcher-torchrun" / "provenance.json").exists()
    assert (workflow.directory / "results" / "runs" / "launcher-mpirun" / "provenance.json").exists()


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_slurm_signals_reach_every_rank(workflow: SlurmWorkflow, launcher: str, tmp_path: Path):
    """`scancel --signal` (what `sbatch --signal` does before the time limit) reaches all 4 ranks
    of a launch built the way snakeddp.launch builds it, in an environment the jobstep emptied."""
    wrap = shlex.join([sys.executable, str(PROBE), "launch", launcher, "2", "2", str(tmp_path)])
    job = workflow.slurm(
        "sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=2", f"--output={tmp_path}/job.log", f"--wrap={wrap}"
    ).strip()
    deadline = time.monotonic() + 300
    while len(list(tmp_path.glob("ready-*.json"))) < 4:
        assert time.monotonic() < deadline, (tmp_path / "job.log").read_text()
        time.sleep(0.2)
    workflow.slurm("scancel", "--signal=USR1", job)
    while workflow.slurm("squeue", "--noheader", "--jobs", job).strip():
        assert time.monotonic() < deadline
        time.sleep(0.5)
    signalled = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("signalled-*.json"))]
    assert [(r["rank"], r["node"]) for r in signalled] == [(rank, NODES[rank // 2]) for rank in range(4)]


MAX_EPOCHS = 12
# The preempted runs' model: the default MLP, whose ranks wait at the start of their third epoch until the test has
# signalled every run's job and opened the gate. Without the wait an mpirun run trained its twelve epochs (0.2-0.4 s
# each on Nov 28's machine) before scancel's USR1 reached its ranks, and its job completed.
GATED_MODEL = """
import os
import time

from snakeddp.training.models import MLP


class GatedMLP(MLP):
    def __init__(self, num_features: int, num_classes: int, gate: str) -> None:
        super().__init__(num_features, num_classes, hidden_sizes=[16])
        self.gate = gate

    def on_train_epoch_start(self) -> None:
        deadline = time.monotonic() + 120
        while self.current_epoch == 2 and not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.05)
"""


def preempted_config(workflow: SlurmWorkflow, **sections) -> dict:
    """Runs of the gated model (put where snakemake runs, which every rank imports from), on batches of 4."""
    (workflow.directory / "gated.py").write_text(GATED_MODEL)
    trainer = {"max_epochs": MAX_EPOCHS, "batch_size": 4, "early_stopping": {"enabled": False}}
    runs = config(trainer=trainer, **sections)
    runs["model"] = {"target": "gated:GatedMLP", "kwargs": {"gate": str(workflow.directory / "gate")}}
    return runs


@pytest.fixture(scope="module")
def preempted(workflow: SlurmWorkflow):
    """Two runs (srun, mpirun; 2 nodes x 1 task) that get SIGUSR1 from Slurm in their third epoch."""
    # The data of the first test; batches of 4 make ~40 steps per epoch.
    workflow.write_config(
        preempted_config(
            workflow, launch={"nodes": 2, "devices": 1}, sweep={"launch.launcher": ["srun", "mpirun"], "seed": [5]}
        )
    )
    runs = ("launcher-srun_seed-5", "launcher-mpirun_seed-5")
    # Only the runs are the targets: the report jobs would add minutes of Slurm round trips here.
    return preempt(workflow, runs, "--retries", "1", *(f"results/runs/{run}/provenance.json" for run in runs))


def preempt(workflow: SlurmWorkflow, runs: tuple[str, ...], *args: str) -> tuple[int, str, dict[str, str]]:
    """Run Snakemake, SIGUSR1 each run's job through Slurm once two of its epochs are done, and then open the
    gated model's gate: Snakemake's exit status and output, and the job signalled per run."""
    gate = workflow.directory / "gate"
    gate.unlink(missing_ok=True)
    snakemake = subprocess.Popen(
        workflow.command(*args),
        cwd=workflow.directory,
        env=workflow.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    signalled: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 600
        while len(signalled) < len(runs):
            assert snakemake.poll() is None and time.monotonic() < deadline, "training ended before the signal"
            for run in set(runs) - set(signalled):
                metrics = workflow.directory / "results" / "runs" / run / "metrics.csv"
                if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
                    (job,) = [job for job, comment in running_jobs(workflow) if comment.endswith(f"_wildcards_{run}")]
                    workflow.slurm("scancel", "--signal=USR1", job)
                    signalled[run] = job
            time.sleep(0.2)
        gate.touch()
        output, _ = snakemake.communicate(timeout=900)
    finally:
        if snakemake.poll() is None:
            snakemake.kill()
            snakemake.communicate()
    return snakemake.returncode, output, signalled


def running_jobs(workflow: SlurmWorkflow) -> list[tuple[str, str]]:
    out = workflow.slurm("squeue", "--noheader", "--states=RUNNING", "--format=%i|%k")
    return [tuple(line.split("|", 1)) for line in out.splitlines()]


@pytest.mark.parametrize("run", ["launcher-srun_seed-5", "launcher-mpirun_seed-5"])
def test_preempted_run_resumes_from_last_checkpoint_on_retry(workflow: SlurmWorkflow, preempted, run: str):
    """Every rank stops at one step, saves last.ckpt and exits 75; the retry (profile `retries`)
    continues that epoch instead of starting over."""
    returncode, output, signalled = preempted
    assert returncode == 0, output[-5000:]
    attempts = [job for job in accounted_jobs(workflow) if job["Comment"].endswith(f"_wildcards_{run}")]
    assert [(job["JobID"], job["State"]) for job in attempts] == [(signalled[run], "FAILED"), (ANY, "COMPLETED")]
    # Snakemake showed the failed attempt's rule log (show-failed-logs) before the retry.
    saved = f"saved results/runs/{run}/checkpoints/last.ckpt"
    stopped = re.search(rf"preempted in epoch (\d+)/{MAX_EPOCHS}; {saved}", output)
    assert stopped, output[-5000:]
    epoch = int(stopped.group(1)) - 1  # the message counts epochs from 1, as the progress lines do; rows from 0
    assert epoch >= 2

    record = provenance(workflow, run)
    assert record["training"]["resumed_from"]["path"] == "checkpoints/last.ckpt"
    assert record["training"]["epochs_completed"] == MAX_EPOCHS
    # Every epoch trained exactly once: the ones before the signal finished during the first
    # attempt and were not redone, the rest during the retry.
    rows = metrics(workflow, run)
    assert [int(row["epoch"]) for row in rows] == list(range(MAX_EPOCHS))
    first_end = attempts[0]["End"]
    assert all(row["finished_at"][:19] <= first_end for row in rows[:epoch])
    assert all(row["finished_at"][:19] >= first_end for row in rows[epoch:])


def metrics(workflow: SlurmWorkflow, run: str) -> list[dict[str, str]]:
    path = workflow.directory / "results" / "runs" / run / "metrics.csv"
    return list(csv.DictReader(io.StringIO(path.read_text())))


@pytest.mark.parametrize(
    ("launcher_args", "expected"),
    [
        (["--launcher", "mpirun"], "meant to be started by mpirun, but its variables are missing"),
        ([], "srun started 1 node(s) x 2 process(es), but the run config asks for launch.nodes=1 x launch.devices=1"),
    ],
)
def test_ranks_that_cannot_be_resolved_refuse_to_train(
    workflow: SlurmWorkflow, tmp_path: Path, launcher_args: list[str], expected: str
):
    """Two srun tasks of a one-process run must fail, never train two independent copies; and before they
    import torch (here made unimportable: a rank that got that far would fail with its ImportError instead)."""
    run_yaml = tmp_path / "config.yaml"  # a plain config file is a run called "base"
    run_yaml.write_text(yaml.safe_dump(config()))
    train = [sys.executable, "-m", "snakeddp.train", "--config", str(run_yaml), "--run-dir", str(tmp_path / "run")]
    argv = ["srun", "--ntasks=2", *train, "--data", str(tmp_path / "manifest.json"), *launcher_args]
    env = workflow.env()
    env["PYTHONPATH"] = f"{torch_unimportable(tmp_path)}:{env['PYTHONPATH']}"
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 0
    # One line, printed once: rank 0 speaks for both tasks (the other fails silently, non-zero).
    assert (done.stdout + done.stderr).count(expected) == 1, done.stdout + done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_five_partitions_are_three_slurm_jobs(workflow: SlurmWorkflow, mpirun_and_a_bad_run):
    _, _, jobs = mpirun_and_a_bad_run
    dataset = Path("results", "data", dataset_id(validate(config(data=MANY))["data"]))
    # 5 partitions and the validation set, 2 to a bundle: 3 sbatch calls instead of 6 (the invocation's
    # other jobs are its runs', and the environment records' where the module's first pipeline has not made them).
    data = [(job_rule(job), job["State"]) for job in jobs if job_rule(job) not in ("train", "env_capture")]
    assert data == [("data", "COMPLETED")] * 3, jobs
    assert len(list((workflow.directory / dataset / "train").glob("part-*.safetensors"))) == 5


def test_raised_runtime_resumes_a_preempted_run_and_memory_never_retrains(workflow: SlurmWorkflow):
    """Scheduler requests are not part of a run: after a preemption, raising launch.runtime resumes
    from last.ckpt (and reaches sbatch); on the finished run, raising launch.mem_mb reruns nothing."""
    run = "seed-7"
    workflow.write_config(preempted_config(workflow, launch={"runtime": 10, "mem_mb": 1000}, sweep={"seed": [7]}))
    target = f"results/runs/{run}/provenance.json"
    returncode, output, _ = preempt(workflow, (run,), "--retries", "0", target)
    assert returncode != 0 and "preempted in epoch" in output, output[-5000:]
    assert not (workflow.directory / target).exists()

    workflow.write_config(preempted_config(workflow, launch={"runtime": 20, "mem_mb": 1000}, sweep={"seed": [7]}))
    assert "run_config" not in workflow.planned_jobs(), "a longer runtime does not rewrite run.yaml"
    workflow.run(target)
    record = provenance(workflow, run)
    assert record["training"]["resumed_from"]["path"] == "checkpoints/last.ckpt"
    assert [int(row["epoch"]) for row in metrics(workflow, run)] == list(range(MAX_EPOCHS)), "no epoch trained twice"
    limits = workflow.slurm(
        "sacct", "--allocations", "--parsable2", "--noheader", "--format=Comment%200,Timelimit,WorkDir%500"
    )
    here = os.path.realpath(workflow.directory)  # the cluster is shared: another file's run may be called seed-7
    rows = [line.split("|") for line in limits.splitlines()]
    ours = [row[1] for row in rows if row[0].endswith(f"_wildcards_{run}") and os.path.realpath(row[2]) == here]
    assert ours == ["00:10:00", "00:20:00"], "sbatch got the raised runtime"

    workflow.write_config(preempted_config(workflow, launch={"runtime": 20, "mem_mb": 1500}, sweep={"seed": [7]}))
    assert workflow.planned_jobs(target) == {}, "more memory never retrains a finished run"
    # The whole workflow plans no job of the run either (what else it plans, the report and the other
    # stages' environment records, depends on what the module's earlier tests made).
    planned = workflow.planned_jobs()
    assert "run_config" not in planned and "train" not in planned, planned


def test_a_search_submits_each_rung_as_slurm_jobs_and_continues_the_winner(workflow: SlurmWorkflow):
    """Successive halving on the cluster: rung 0's runs are sbatch jobs of search_train, the rung's
    decision runs on the login node, and rung 1 (the top: rule train) continues the winner."""
    settings = {"trainer": {"max_epochs": 2, "early_stopping": {"enabled": False}}}
    search = {"method": "successive_halving", "eta": 2, "min_epochs": 1}
    workflow.write_config(config(**settings, sweep={"model.lr": [0.1, 0.0001]}, search=search))
    # The last rung's decision as the target: the report job (another Slurm job) adds nothing here.
    done = workflow.run("results/search/rung-1.json")
    jobs = accounted_jobs(workflow, run_uuid(done.stdout + done.stderr))
    assert sorted((job_rule(job), job["State"]) for job in jobs) == [
        ("search_train", "COMPLETED"),
        ("search_train", "COMPLETED"),
        ("train", "COMPLETED"),
    ], jobs
    rung0 = [job for job in jobs if job_rule(job) == "search_train"]
    (top,) = [job for job in jobs if job_rule(job) == "train"]
    assert all(job["End"] <= top["Start"] for job in rung0), "the top rung waits for rung 0's decision"
    winner = top["Comment"].split("_wildcards_")[1]
    assert winner == "lr-0.1"
    assert metrics_epochs(workflow, winner) == [0, 1], "two epochs in the run's metrics, the first from rung 0"
    assert "Nothing to be done" in workflow.run("results/search/rung-1.json").stderr
