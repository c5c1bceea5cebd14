"""The job's own command (snakeddp.remote.entry train), run for real the way AzureML starts it.

Each test writes a real v2 job spec, takes its command and environment variables, fills in
the ${{...}} folders as AzureML does, and starts the processes from the job's code snapshot
(not this checkout): under OpenMPI's mpirun for the MPI distribution, or as separate processes
with the variables AzureML's PyTorch distribution sets. A simulated 2-node layout is real
OpenMPI over two "hosts" whose ssh is a local stand-in, so every rank sees a local size of 1.
"""

import copy
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import psutil
import pytest
from azure.ai.ml import load_job

from snakeddp.azureml import submit
from snakeddp.azureml.settings import Settings
from snakeddp.remote.attempt import collect
from snakeddp.run import tries
from snakeddp.run.layout import RESUME_SEEDED as SEEDED
from snakeddp.util.hashing import sha256_file
from tests.azureml.plans import build_plan
from tests.helpers import TINY, make_run, subprocess_env

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")
MPIRUN = shutil.which("mpirun")
LOOPBACK = {
    "OMPI_MCA_btl": "self,tcp",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "OMPI_MCA_oob_tcp_if_include": "lo",
    "GLOO_SOCKET_IFNAME": "lo",
}
# Stands in for ssh: runs the command here, whatever host it names.
FAKE_SSH = """#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;
    *) shift; break ;;
  esac
done
exec /bin/sh -c "$*"
"""


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_job(root, distribution, nodes, devices, trainer=None):
    """A run, its v2 job spec, and the job as the SDK loads it."""
    cfg = copy.deepcopy(TINY)
    cfg["launch"].update(nodes=nodes, devices=devices)
    cfg["trainer"].update(trainer or {})
    run_yaml, manifest = make_run(root, cfg)
    settings = Settings.from_section({"compute": "gpu-cluster", "distribution": distribution})
    args = Namespace(config=run_yaml, run_dir=run_yaml.parent, data=manifest, environment_record=None)
    plan, _ = build_plan(args, settings)
    return plan, load_job(submit.write_spec(plan))


def job_shell_command(job, plan, out_dir):
    """The job's command with its folders filled in, as AzureML does before the shell sees it."""
    command = job.command.replace("${{outputs.run_dir}}", str(out_dir))
    command = command.replace("${{inputs.data}}", str((plan.spec_dir / job.inputs["data"].path).resolve()))
    if "resume" in job.inputs:
        command = command.replace("${{inputs.resume}}", str((plan.spec_dir / job.inputs["resume"].path).resolve()))
    return command


def job_env(job, azureml):
    """This machine's environment without our checkout on PYTHONPATH, plus the job's and AzureML's variables."""
    env = {k: v for k, v in subprocess_env().items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    return {**env, **LOOPBACK, **job.environment_variables, **azureml}


def run_mpi(job, plan, out_dir, azureml, hosts=None, timeout=600):
    assert MPIRUN, "needs OpenMPI's mpirun: tools/system-packages.sh installs it"
    argv = [MPIRUN, "-np", "2", "--bind-to", "none"]
    if hosts is not None:
        agent = hosts.parent / "ssh"
        agent.write_text(FAKE_SSH)
        agent.chmod(0o755)
        argv += ["--hostfile", str(hosts), "--map-by", "ppr:1:node", "--mca", "plm_rsh_agent", str(agent)]
    else:
        argv += ["--oversubscribe"]
    argv += ["/bin/sh", "-c", job_shell_command(job, plan, out_dir)]
    return subprocess.run(
        argv, cwd=plan.code_dir, env=job_env(job, azureml), capture_output=True, text=True, timeout=timeout
    )


def start_pytorch(job, plan, out_dir, ranks, logs):
    """One process per rank, each with the variables AzureML's PyTorch distribution gives it."""
    command = job_shell_command(job, plan, out_dir)
    logs.mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=plan.code_dir,
            env=job_env(job, variables),
            stdout=(logs / f"rank-{variables['RANK']}.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        for variables in ranks
    ]


def finish(procs, logs, timeout=600):
    codes = [p.wait(timeout=timeout) for p in procs]
    return codes, "\n".join(log.read_text()[-3000:] for log in sorted(logs.glob("rank-*.log")))


def run_pytorch(job, plan, out_dir, ranks):
    logs = out_dir.parent / "logs"
    return finish(start_pytorch(job, plan, out_dir, ranks, logs), logs)


def pytorch_ranks(nodes, devices, port, job_name):
    world = nodes * devices
    return [
        {
            "RANK": str(node * devices + local),
            "LOCAL_RANK": str(local),
            "WORLD_SIZE": str(world),
            "NODE_RANK": str(node),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "AZUREML_NODE_COUNT": str(nodes),
            "AZUREML_RUN_ID": job_name,
        }
        for node in range(nodes)
        for local in range(devices)
    ]


def check_provenance(out_dir, launcher, nodes, devices, master, job_name, epochs=TINY["trainer"]["max_epochs"]):
    record = json.loads((out_dir / "provenance.json").read_text())
    launch = record["launch"]
    assert record["status"] == "completed" and record["training"]["epochs_completed"] == epochs
    assert (launch["launcher"], launch["world_size"]) == (launcher, nodes * devices)
    assert (launch["nodes"], launch["processes_per_node"]) == (nodes, devices)
    assert (launch["master_addr"], launch["master_port"]) == master
    assert sorted(r["rank"] for r in launch["ranks"]) == list(range(nodes * devices))
    # AzureML's run id is the job id; what the submitter put into the job is in its variables.
    assert launch["job_id"] == job_name
    variables = launch["variables"]
    assert (variables["SNAKEDDP_PLATFORM"], variables["SNAKEDDP_AZUREML_COMPUTE"]) == ("azureml", "gpu-cluster")
    assert variables["SNAKEDDP_AZUREML_SDK"] == "v2"
    assert record["code"]["source"] == "submitter", "the job has no .git: the commit came from the submitter"
    rows = (out_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + epochs
    return record


@pytest.mark.e2e
def test_mpi_distribution_single_node(tmp_path):
    plan, job = write_job(tmp_path, "mpi", nodes=1, devices=2)
    out = tmp_path / "outputs" / "run_dir"
    # Single-node MPI jobs get the address without a port; the job would take 29500 (tests/cluster/test_cluster.py),
    # which another test's ranks may hold at this moment, so a free one is named the way a user would.
    port = free_port()
    azureml = {"AZ_BATCHAI_MPI_MASTER_NODE": "127.0.0.1", "AZUREML_RUN_ID": "job-mpi-1", "MASTER_PORT": str(port)}
    done = run_mpi(job, plan, out, azureml)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check_provenance(out, "mpirun", 1, 2, ("127.0.0.1", port), "job-mpi-1")


@pytest.mark.e2e
def test_mpi_distribution_two_nodes(tmp_path):
    plan, job = write_job(tmp_path, "mpi", nodes=2, devices=1)
    hosts = tmp_path / "mpi" / "hosts"
    hosts.parent.mkdir()
    hosts.write_text("localhost slots=1\n127.0.0.2 slots=1\n")
    out = tmp_path / "outputs" / "run_dir"
    port = free_port()
    # What the submitter adds to the job when it submits it: the spec's hash and the workspace.
    spec = plan.spec_dir / "job.yml"
    workspace = {"subscription_id": "sub-id", "resource_group": "rg", "workspace_name": "ws"}
    settings = Settings.from_section({"compute": "gpu-cluster", "workspace": workspace})
    added = submit.submission_variables(settings, sha256_file(spec))
    azureml = {"AZ_BATCH_MASTER_NODE": f"127.0.0.1:{port}", "AZUREML_RUN_ID": "job-mpi-2", **added}
    done = run_mpi(job, plan, out, azureml, hosts=hosts)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = check_provenance(out, "mpirun", 2, 1, ("127.0.0.1", port), "job-mpi-2")
    assert sorted(r["node_rank"] for r in record["launch"]["ranks"]) == [0, 1]
    variables = record["launch"]["variables"]
    assert variables["SNAKEDDP_JOB_SPEC_SHA256"] == sha256_file(spec)
    assert (variables["SNAKEDDP_AZUREML_RESOURCE_GROUP"], variables["SNAKEDDP_AZUREML_WORKSPACE"]) == ("rg", "ws")


@pytest.mark.e2e
@pytest.mark.parametrize(("nodes", "devices"), [(1, 2), (2, 1)])
def test_pytorch_distribution(tmp_path, nodes, devices):
    plan, job = write_job(tmp_path, "pytorch", nodes=nodes, devices=devices)
    out = tmp_path / "outputs" / "run_dir"
    port = free_port()
    codes, output = run_pytorch(job, plan, out, pytorch_ranks(nodes, devices, port, "job-pt"))
    assert codes == [0] * (nodes * devices), output[-5000:]
    check_provenance(out, "env", nodes, devices, ("127.0.0.1", port), "job-pt")


@pytest.mark.e2e
def test_job_lost_mid_run_resumes_from_the_downloaded_attempt(tmp_path):
    epochs = 8
    plan, job = write_job(
        tmp_path, "pytorch", nodes=1, devices=2, trainer={"max_epochs": epochs, "early_stopping": {"enabled": False}}
    )
    run_dir = tmp_path / "results" / "runs" / "base"
    first = tmp_path / "outputs" / "job-1" / "run_dir"
    logs = first.parent / "logs"
    procs = start_pytorch(job, plan, first, pytorch_ranks(1, 2, free_port(), "job-1"), logs)
    deadline = time.monotonic() + 300
    while not (first / "metrics.csv").is_file() or len((first / "metrics.csv").read_text().splitlines()) < 3:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), finish(procs, logs)[1]
        time.sleep(0.1)
    # The node is lost (a low-priority VM reclaimed, a crash): every training process dies at once.
    for proc in procs:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
    codes, output = finish(procs, logs)
    assert all(code != 0 for code in codes), output
    assert collect(first, run_dir), "what the failed job saved comes back"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and not (run_dir / "provenance.json").exists()
    done_before = len((run_dir / "metrics.csv").read_text().splitlines()) - 1
    assert 2 <= done_before < epochs
    # The newest checkpoint it saved whole: last.ckpt, or the epoch's top-k one where the kill came between the two
    # (its metrics row, which the loop above waits for, is written just before them).
    newest = tries.newest_checkpoint(run_dir)
    assert newest is not None

    args = Namespace(config=run_dir / "run.yaml", run_dir=run_dir, data=plan.data.local_dir / "manifest-3.json")
    plan, _ = build_plan(args, Settings.from_section({"compute": "gpu-cluster"}))
    job = load_job(submit.write_spec(plan))
    assert "resume" in job.inputs
    second = tmp_path / "outputs" / "job-2" / "run_dir"
    port = free_port()
    codes, output = run_pytorch(job, plan, second, pytorch_ranks(1, 2, port, "job-2"))
    assert codes == [0, 0], output
    assert (second / SEEDED).read_text() == "job-2", "rank 0 seeded this job's run directory"
    record = check_provenance(second, "env", 1, 2, ("127.0.0.1", port), "job-2", epochs=epochs)
    assert record["training"]["resumed_from"]["path"] == f"checkpoints/{newest.name}"
    rows = [int(row.split(",")[0]) for row in (second / "metrics.csv").read_text().splitlines()[1:]]
    assert rows == list(range(epochs)), "the resumed job continued the same metrics, no epoch twice"
