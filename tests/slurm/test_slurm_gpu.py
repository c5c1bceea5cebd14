"""GPU runs as profiles/slurm asks for them, accepted by a real Slurm whose nodes declare GPUs.

The test cluster's nodes declare ``gpu:a100:2`` each, the features ``a100,ib`` and a QOS ``long``
(tests/slurm/cluster.py) and have no GPU: Slurm schedules, accounts and hands out the GPUs, and
the ranks then stop on the one line that names the node, its driver and torch's CUDA build.
First the plugin's own sbatch commands for the documented layouts go to ``sbatch --test-only``
(no job); then one Snakemake invocation per layout submits real jobs through a site's copy of the
profile, and sacct shows what they asked for and got.
"""

from __future__ import annotations

import csv
import io
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from snakeddp.util import gpus
from tests.helpers import REPO
from tests.slurm.cluster import FEATURES, GPU_TYPE, NODES, QOS
from tests.slurm.workflow import SlurmWorkflow, config, run_uuid
from tests.slurm_requests import submit_command, train_resources

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

CONSTRAINT = "&".join(FEATURES)
# What a site declares in its copy of the profile: the test nodes share 2 cores and this
# machine's memory, so a rank gets one core and 500 MB here (defaults: 4 cores, 16000 MB).
SITE = {"accelerator": "gpu", "gpu_type": GPU_TYPE, "mem_mb_per_gpu": 500, "cpus_per_gpu": 1}
NO_CUDA = "torch sees no CUDA device on "


def site_profile(directory: Path) -> Path:
    """profiles/slurm as docs/slurm.md tells a site to copy and fill it in: site:, constraint, qos."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    site = ", ".join(f"{key}: {value}" for key, value in SITE.items())
    profile["config"].append(f"site={{{site}}}")
    # Quoted twice like slurm_extra: Snakemake evaluates resource values as Python.
    profile["set-resources"]["train"].update(constraint=f"'{CONSTRAINT}'", qos=f"'{QOS}'")
    directory.mkdir()
    (directory / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return directory


@pytest.mark.parametrize(
    ("launch", "accepted"),
    [
        ({"devices": 2}, True),
        ({"nodes": 2, "devices": 1}, True),
        ({"nodes": 2, "devices": 1, "launcher": "mpirun"}, True),
        ({"nodes": 2, "devices": 2}, True),
        # More GPUs per node than any node has: the check below does look at GPUs.
        ({"devices": 3}, False),
    ],
)
def test_the_plugins_sbatch_for_a_gpu_run_is_one_slurm_accepts(slurm_cluster, launch, accepted):
    resources = {**train_resources({"accelerator": "auto", **launch}, SITE), "constraint": CONSTRAINT, "qos": QOS}
    command = submit_command(resources)
    assert "--ntasks-per-gpu" not in command and "--gpus" not in command
    assert f"--gres=gpu:{GPU_TYPE}:{launch['devices']}" in command
    argv = shlex.split(command)
    test_only = [argv[0], "--test-only", *argv[1:], "--wrap", "true"]
    done = subprocess.run(test_only, env=slurm_cluster.client_env(), capture_output=True, text=True, timeout=60)
    if accepted:
        assert done.returncode == 0 and "to start at" in done.stderr, (command, done.stderr)
    else:
        assert done.returncode != 0 and "Requested node configuration is not available" in done.stderr


# The layouts docs/slurm.md describes, each one Snakemake invocation in its own directory. Both
# run at once: most of an invocation is the plugin's status polling, and the cluster's 4 cores and
# 4 GPUs hold both (Slurm gives concurrent jobs on one node different GPUs).
LAYOUTS = {
    "one-node": ({"devices": 2}, {}),
    "two-nodes": ({"nodes": 2, "devices": 1}, {"launch.launcher": ["srun", "mpirun"]}),
}


@pytest.fixture(scope="module")
def submitted(tmp_path_factory: pytest.TempPathFactory, slurm_cluster) -> dict[str, tuple[SlurmWorkflow, str, dict]]:
    """Per layout: its workflow, Snakemake's output, and sacct's record of its train jobs by run."""
    directory = tmp_path_factory.mktemp("slurm-gpu")
    profile = site_profile(directory / "mysite")
    started = {}
    try:
        for name, (layout, sweep) in LAYOUTS.items():
            flow = SlurmWorkflow(directory / name, slurm_cluster)
            flow.directory.mkdir()
            flow.profile = profile
            # auto resolved by the site; memory sized per GPU rank (TINY pins 1000 MB).
            launch = {**layout, "accelerator": "auto", "mem_mb": None}
            flow.write_config(config(trainer={"max_epochs": 1}, launch=launch, sweep=sweep))
            runs = [f"launcher-{value}" for value in sweep.get("launch.launcher", [])] or ["base"]
            # Only the runs: the report and the other stages' environment records add jobs, not checks.
            targets = [f"results/runs/{run}/provenance.json" for run in runs]
            argv = flow.command("--retries", "0", "--keep-going", *targets)
            process = subprocess.Popen(
                argv, cwd=flow.directory, env=flow.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            started[name] = (flow, process)
        results = {}
        for name, (flow, process) in started.items():
            output, _ = process.communicate(timeout=900)
            assert process.returncode != 0, f"{name}: GPU runs cannot train on the CPU-only test nodes"
            results[name] = (flow, output, train_jobs(flow, run_uuid(output)))
        return results
    finally:
        for _, process in started.values():
            if process.poll() is None:
                process.kill()
                process.communicate()


def train_jobs(workflow: SlurmWorkflow, uuid: str) -> dict[str, dict[str, str]]:
    """sacct's record of one invocation's train jobs, by run."""
    fields = "JobID,JobName%60,State,NNodes,ReqTRES%200,AllocTRES%200,QOS,Constraints%40,Comment%200"
    out = workflow.slurm("sacct", "--allocations", "--parsable2", f"--format={fields}", f"--name={uuid}")
    rows = csv.DictReader(io.StringIO(out), delimiter="|")
    return {row["Comment"].split("_wildcards_")[1]: row for row in rows if row["Comment"].startswith("rule_train_")}


def step_tres(workflow: SlurmWorkflow, job_id: str) -> dict[str, str]:
    """AllocTRES of a job's steps by name (python: srun's ranks; orted: mpirun's daemons)."""
    out = workflow.slurm("sacct", "--jobs", job_id, "--parsable2", "--noheader", "--format=JobID,JobName,AllocTRES%200")
    return {name: alloc for job, name, alloc in (line.split("|") for line in out.splitlines()) if "." in job}


def tres(field: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in field.split(",") if item)


def assert_asked_and_got(job: dict[str, str], nodes: int, per_node: int) -> None:
    gpus = str(nodes * per_node)
    expected = {"gres/gpu": gpus, f"gres/gpu:{GPU_TYPE}": gpus, "node": str(nodes), "cpu": gpus}
    assert expected.items() <= tres(job["ReqTRES"]).items(), job
    assert expected.items() <= tres(job["AllocTRES"]).items(), job
    # Memory: devices x site.mem_mb_per_gpu per node (sacct counts the job's whole).
    assert tres(job["ReqTRES"])["mem"] == f"{nodes * per_node * SITE['mem_mb_per_gpu']}M"
    assert (job["QOS"], job["Constraints"], job["State"]) == (QOS, CONSTRAINT, "FAILED")


def assert_stopped_without_cuda(workflow: SlurmWorkflow, run: str, visible: str) -> None:
    """The ranks found no CUDA device although Slurm gave them GPUs: one line, printed once, naming
    the node (either of the job's: the first rank to stop speaks), the driver and torch's build, as this
    machine has them (none here; under `python -m tests.gpu_standin --unreachable`, a GPU host's driver and
    a CUDA build of torch whose processes reach no GPU)."""
    log = (workflow.directory / "logs" / "train" / f"{run}.log").read_text()
    assert log.count(NO_CUDA) == 1, log[-3000:]
    line = next(line for line in log.splitlines() if NO_CUDA in line)
    nodes = "|".join(map(re.escape, NODES))
    driver = re.escape(gpus.driver_version() or "none loaded")
    built = re.escape(f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU build")
    pattern = rf"{NO_CUDA}({nodes}) \(NVIDIA driver: {driver}; torch \S+, {built}; "
    assert re.search(pattern + rf"CUDA_VISIBLE_DEVICES={visible}; this node shows no GPU", line), line
    assert line.count("HINT:") == 1


def test_one_node_with_two_typed_gpus_a_constraint_and_a_qos(submitted):
    flow, output, jobs = submitted["one-node"]
    assert list(jobs) == ["base"], output[-3000:]
    assert_asked_and_got(jobs["base"], nodes=1, per_node=2)
    # The ranks' srun step holds both GPUs, and each rank sees both (it picks cuda:<local rank>).
    assert tres(step_tres(flow, jobs["base"]["JobID"])["python"])["gres/gpu"] == "2"
    assert_stopped_without_cuda(flow, "base", "0,1")


def test_two_nodes_with_one_gpu_each_by_srun_and_by_mpirun(submitted):
    flow, output, jobs = submitted["two-nodes"]
    assert sorted(jobs) == ["launcher-mpirun", "launcher-srun"], output[-3000:]
    for run, step in (("launcher-srun", "python"), ("launcher-mpirun", "orted")):
        assert_asked_and_got(jobs[run], nodes=2, per_node=1)
        # mpirun's daemons are started by OpenMPI's own srun: plm_slurm_args gives that step the GPUs.
        steps = step_tres(flow, jobs[run]["JobID"])
        assert tres(steps[step])["gres/gpu"] == "2", steps
        # One GPU per node, index 0 or 1: the other job may hold the node's other GPU.
        assert_stopped_without_cuda(flow, run, "[01]")
    log = (flow.directory / "logs" / "train" / "launcher-mpirun.log").read_text()
    assert "--mca plm_slurm_args '--cpus-per-task=1 --gres=gpu:1'" in log


def test_mig_slices_and_gpus_the_build_cannot_run_are_refused_before_submission(slurm_cluster, tmp_path):
    """The test cluster's partitions mig (gpu:1g.10gb:7) and v100 (gpu:v100:2) under the default build
    (environment.cuda "13.0", kernels from 7.5): a 2-rank run on either is refused in one line before anything
    is submitted, where its ranks would have stopped after the queue (and been queued twice more); what each
    HINT says plans the run."""
    flow = SlurmWorkflow(tmp_path / "flow", slurm_cluster)
    flow.directory.mkdir()
    flow.write_config(config(launch={"accelerator": "gpu", "devices": 2, "mem_mb": None}))
    small = "site={cpus_per_gpu: 1, mem_mb_per_gpu: 500}"
    expected = {
        "mig": (
            "run base: its job asks 1 node for 2 GPUs, 2 CPUs and 1000 MB, and the GPUs of Slurm partition mig are "
            "MIG slices (1g.10gb): a CUDA process enumerates one MIG slice",
            "HINT: set launch.devices: 1 (more launch.nodes for more ranks)",
            "launch={devices: 1}",
        ),
        "v100": (
            "run base: its job asks 1 node for 2 GPUs, 2 CPUs and 1000 MB, and the GPUs of Slurm partition v100 are "
            "v100 (compute capability 7.0), which torch's CUDA 13.0 build has no kernels for",
            "HINT: set launch.accelerator: cpu (the CUDA 12.6 build would serve it, and this checkout has not locked",
            "launch={accelerator: cpu}",
        ),
    }
    for partition, (refusal, hint, followed) in expected.items():
        where = ("--set-resources", f"train:slurm_partition='{partition}'")
        done = flow.run(*where, "--config", small, check=False)
        said = done.stdout + done.stderr
        lines = [line for line in said.splitlines() if "HINT:" in line]
        assert done.returncode != 0 and len(lines) == 1, said[-3000:]
        assert lines[0].startswith(refusal) and hint in lines[0] and "Traceback" not in said, lines[0]
        uuid = run_uuid(said)
        assert not flow.slurm("sacct", "--allocations", "--noheader", f"--name={uuid}").strip(), "a job was submitted"
        # What the HINT says: the run is planned, nothing noted.
        plan = flow.run("-n", *where, "--config", small, followed)
        planned = plan.stdout + plan.stderr
        assert "HINT:" not in planned and "train" in planned, planned[-3000:]
