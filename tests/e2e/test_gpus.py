"""`snakemake --profile local` as typed on machines with GPUs, through stand-in GPUs (tests/gpu_standin.py:
the driver's directory in a mount namespace, torch's CUDA queries answering for it, the first CUDA call
failing): what the workflow plans and refuses, and what each rank checks before its first CUDA call."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from snakeddp.environment.cuda import locked as cuda_locked
from snakeddp.util import gpus
from tests.gpu_standin import StandIn
from tests.helpers import TINY, Workflow, subprocess_env

pytestmark = [pytest.mark.e2e, pytest.mark.dev_venv]  # the GPU stand-in covers the dev venv's torch

# TINY with one train partition and one epoch: these runs stop at the stand-in's first CUDA call, or train on the
# CPU only for their record of where they trained, and each partition is a job.
SMALL = {**TINY, "data": {**TINY["data"], "num_train_files": 1}, "trainer": {**TINY["trainer"], "max_epochs": 1}}
# The default config's shape (a run of one rank and one of two, launch.accelerator auto), small.
SWEEP = {**SMALL, "launch": {**SMALL["launch"], "accelerator": "auto"}, "sweep": {"launch.devices": [1, 2]}}
# One run on one GPU.
ONE_GPU = {**SMALL, "launch": {**SMALL["launch"], "accelerator": "gpu", "devices": 1}}
FIRST_CUDA_CALL = "stand-in GPU: this is the first CUDA call"


def flow_in(directory: Path, config: dict) -> Workflow:
    directory.mkdir(parents=True)
    flow = Workflow(directory)
    flow.write_config(config)
    return flow


def hints(done) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if "HINT:" in line]


def planned_before_any_job(line: str, done) -> bool:
    """``line`` is in ``done``'s output before its first job: the plan's, as a dry run would say it."""
    first = re.search(r"^Job \d+: ", done.stderr, re.M)
    return first is not None and line in done.stderr[: first.start()]


def trained(*runs: str) -> list[str]:
    """The targets that train ``runs``, the report aside: runs that stop at the stand-in's first CUDA call never
    make it, and its stage's environment record would cost a process each time."""
    return [f"results/runs/{run}/provenance.json" for run in runs]


def test_one_gpu_trains_the_one_rank_run_on_it_and_the_two_rank_run_on_the_cpu(tmp_path: Path):
    standin = StandIn(tmp_path / "gpus", count=1)
    flow = flow_in(tmp_path / "flow", SWEEP)
    env = standin.env(subprocess_env(), visible=None)
    done = flow.run("--keep-going", *trained("devices-1", "devices-2"), check=False, env=env, wrap=standin.command)
    note = [line for line in done.stderr.splitlines() if "trains it on the CPU" in line]
    assert note == [
        "snakeddp: run devices-2: 2 ranks, and this machine shows 1 GPU (NVIDIA A100-SXM4-40GB): launch.accelerator "
        "auto trains it on the CPU (launch.accelerator: gpu would refuse it instead)."
    ], done.stderr
    assert planned_before_any_job(note[0], done) and not hints(done), done.stderr[-3000:]
    assert done.returncode != 0, "the one-rank run reaches the stand-in's first CUDA call"
    on_cpu = json.loads((flow.directory / "results/runs/devices-2/provenance.json").read_text())
    assert on_cpu["launch"]["accelerator"] == "cpu" and on_cpu["launch"]["backend"] == "gloo"
    assert on_cpu["launch"]["variables"]["SNAKEDDP_ACCELERATOR"] == "cpu"
    log = (flow.directory / "logs/train/devices-1.log").read_text()
    # Every check before CUDA passed: the rank named its GPU, then met the first CUDA call.
    assert "snakeddp: 1 rank(s) on NVIDIA A100-SXM4-40GB, compute capability 8.0, CUDA 13.0 build" in log, log[-3000:]
    assert FIRST_CUDA_CALL in log and "HINT:" not in log, log[-3000:]


def test_a_run_asking_for_more_gpus_than_there_are_is_refused_before_any_job_and_its_hint_plans(tmp_path: Path):
    standin = StandIn(tmp_path / "gpus", count=1)
    flow = flow_in(tmp_path / "flow", {**SWEEP, "launch": {**SWEEP["launch"], "accelerator": "gpu"}})
    env = standin.env(subprocess_env(), visible=None)
    refused = flow.run(check=False, env=env, wrap=standin.command)
    assert refused.returncode != 0 and hints(refused) == [
        "run devices-2: launch.accelerator: gpu asks for 2 GPUs (launch.devices), and this machine shows 1 GPU "
        "(NVIDIA A100-SXM4-40GB). HINT: set launch.devices: 1 or fewer (sweep only what fits), or set "
        "launch.accelerator: auto to train what does not fit on the CPU."
    ]
    assert not (flow.directory / "results").exists() and not (flow.directory / "logs").exists()
    # What the HINT says: only what fits.
    fits = flow.run("-n", "--config", "sweep={launch.devices: [1]}", env=env, wrap=standin.command)
    assert not hints(fits) and "train" in fits.stdout


def test_gpus_hidden_by_cuda_visible_devices_are_none_to_plan_with(tmp_path: Path):
    standin = StandIn(tmp_path / "gpus", count=2)
    flow = flow_in(tmp_path / "flow", ONE_GPU)
    refused = flow.run("-n", check=False, env=standin.env(subprocess_env(), visible=""), wrap=standin.command)
    (line,) = hints(refused)
    assert "this machine shows no GPU visible (2 installed, CUDA_VISIBLE_DEVICES='' hides them)" in line, line
    assert "HINT: leave CUDA_VISIBLE_DEVICES unset" in line
    # What the HINT says; and auto with the GPUs hidden plans the CPU, as it would train it.
    assert not hints(flow.run("-n", env=standin.env(subprocess_env(), visible=None), wrap=standin.command))
    flow.write_config({**ONE_GPU, "launch": {**ONE_GPU["launch"], "accelerator": "auto"}})
    hidden = flow.run("-n", env=standin.env(subprocess_env(), visible=""), wrap=standin.command)
    assert not hints(hidden) and "trains it on the CPU" not in hidden.stderr


def test_a_v100_under_the_cuda_13_build_is_refused_before_any_job_in_one_line_naming_both(tmp_path: Path):
    standin = StandIn(tmp_path / "gpus", count=1, capability="7.0", model="Tesla V100-SXM2-16GB")
    flow = flow_in(tmp_path / "flow", ONE_GPU)
    done = flow.run(check=False, env=standin.env(subprocess_env(), visible=None), wrap=standin.command)
    assert done.returncode != 0
    (line,) = hints(done)
    assert line.startswith("run base: launch.accelerator: gpu, and Tesla V100-SXM2-16GB has compute capability 7.0")
    # The build that serves it is offered where this checkout's lock of it has hashes, else said to be unlocked.
    keep = 'environment.cuda: "12.6"' if cuda_locked("12.6") else "the CUDA 12.6 build would serve it, and this"
    assert "CUDA 13.0 build has no kernels for" in line and keep in line, line
    assert "Traceback" not in done.stderr and not (flow.directory / "logs").exists(), "nothing ran"


def one_rank_auto(standin: StandIn, tmp_path: Path) -> tuple[Workflow, dict[str, str]]:
    """A one-rank run with launch.accelerator: auto, and the environment it runs in on ``standin``."""
    flow = flow_in(tmp_path / "flow", {**SMALL, "launch": {**SMALL["launch"], "accelerator": "auto", "devices": 1}})
    return flow, standin.env(subprocess_env(), visible=None)


def trained_with_its_line(flow: Workflow, env: dict[str, str], standin: StandIn) -> tuple[str, dict]:
    """The run trained on ``standin`` (the report aside): the one HINT line it said, and its provenance."""
    done = flow.run(*trained("base"), env=env, wrap=standin.command)
    (line,) = hints(done)
    return line, json.loads((flow.directory / "results/runs/base/provenance.json").read_text())


def no_traceback_in_any_log(flow: Workflow) -> None:
    for log in (flow.directory / "logs").rglob("*.log"):
        assert "Traceback" not in log.read_text(), (log, log.read_text()[-3000:])


def test_under_a_driver_older_than_the_build_a_cpu_run_trains_and_a_gpu_run_stops_in_one_line(tmp_path: Path):
    """torch 2.13's CUDA 13.0 build under driver 570: NVML counts the GPU, CUDA's first call would raise."""
    standin = StandIn(tmp_path / "gpus", count=1, driver="570.86.15")
    flow, env = one_rank_auto(standin, tmp_path)
    line, trained = trained_with_its_line(flow, env, standin)
    assert line.startswith(
        "snakeddp: run base: 1 rank, and the NVIDIA driver is 570.86.15, older than the installed"
    ), line
    assert "launch.accelerator auto trains it on the CPU" in line and "HINT: update the driver to 580 or newer" in line
    assert trained["launch"]["accelerator"] == "cpu"
    record = json.loads((flow.directory / "results/envs/train.json").read_text())
    assert record["versions"]["nvidia_driver"] == "570.86.15" and record["versions"]["gpus"] == [
        "NVIDIA A100-SXM4-40GB"
    ]
    no_traceback_in_any_log(flow)
    refused = flow.run("--config", "launch={accelerator: gpu}", check=False, env=env, wrap=standin.command)
    (line,) = hints(refused)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert line.startswith("run base: launch.accelerator: gpu, and the NVIDIA driver is 570.86.15, older than"), line
    assert "(580 or newer). HINT: update the driver to 580 or newer, or declare NVIDIA's forward" in line
    assert line.endswith(
        "or set launch.accelerator: cpu (the CUDA 12.6 build would serve it, and this checkout has not "
        "locked it: envs/requirements-torch-12.6.lock has no hashes, which every installer requires; a "
        "maintainer locks it by running tools/lock.sh where https://download.pytorch.org/whl/cu126 "
        "answers and committing envs/)."
    )
    no_traceback_in_any_log(flow)


def test_wsl2_without_the_drivers_proc_files_plans_the_one_rank_run_on_its_gpu(tmp_path: Path):
    """The plan; what the rank checks on such a machine, tests/environment/test_cuda.py's WSL2 check."""
    standin = StandIn(tmp_path / "gpus", count=1, proc=False, model="NVIDIA GeForce RTX 4090", capability="8.9")
    flow = flow_in(tmp_path / "flow", SWEEP)
    planned = flow.run("-n", env=standin.env(subprocess_env(), visible=None), wrap=standin.command)
    assert "run devices-2: 2 ranks, and this machine shows 1 GPU (NVIDIA GeForce RTX 4090)" in planned.stderr
    assert not hints(planned) and "train" in planned.stdout


def test_a_container_without_the_gpus_on_a_gpu_host_trains_the_default_config_on_the_cpu(tmp_path: Path):
    standin = StandIn(tmp_path / "gpus", count=2, reachable=False)
    flow = flow_in(tmp_path / "flow", SWEEP)
    runs = ("devices-1", "devices-2")
    flow.run(*trained(*runs), env=standin.env(subprocess_env(), visible=None), wrap=standin.command)
    for run in runs:
        record = json.loads((flow.directory / f"results/runs/{run}/provenance.json").read_text())
        assert record["launch"]["accelerator"] == "cpu", run


def test_two_one_gpu_runs_on_a_two_gpu_machine_train_on_different_gpus(tmp_path: Path):
    standin = StandIn(tmp_path / "gpus", count=2)
    flow = flow_in(tmp_path / "flow", {**ONE_GPU, "sweep": {"seed": [1, 2]}})
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    # Each rank waits at its first CUDA call until both are there: the runs hold their GPUs at once.
    env = {**standin.env(subprocess_env(), visible=None), "SNAKEDDP_STANDIN_MEET": f"{meeting}:2"}
    flow.run("--cores", "2", "--keep-going", *trained("seed-1", "seed-2"), check=False, env=env, wrap=standin.command)
    held = sorted(path.read_text() for path in meeting.iterdir())
    assert held == sorted(standin.uuids), held
    for log in (flow.directory / "logs/train").glob("seed-*[0-9].log"):
        assert FIRST_CUDA_CALL in log.read_text() and ", GPUs GPU-0000000" in log.read_text(), log


def test_beside_another_users_process_on_gpu_0_a_one_gpu_run_takes_gpu_1_saying_why(tmp_path: Path):
    """A shared workstation: GPU 0 of two holds another user's job (78 of 80 GiB, as nvidia-smi shows it)."""
    standin = StandIn(tmp_path / "gpus", count=2, memory_gb=80, processes={0: [(4242, 78)]})
    flow = flow_in(tmp_path / "flow", ONE_GPU)
    env = standin.env(subprocess_env(), visible=None)
    done = flow.run("--keep-going", *trained("base"), check=False, env=env, wrap=standin.command)
    log = (flow.directory / "logs/train/base.log").read_text()
    busy = f"snakeddp: GPU 0 (NVIDIA A100-SXM4-40GB, {standin.uuids[0]}) busy: pid 4242 holds 78 of 80 GiB; "
    line = f"{busy}the run takes GPU 1 (NVIDIA A100-SXM4-40GB, {standin.uuids[1]})."
    assert line in log.splitlines(), log[-3000:]
    # On the terminal too, before the job ends (Snakemake then shows the failed job's log, the line again).
    assert done.stderr.index(line) < done.stderr.index("Error in rule train"), done.stderr[-3000:]
    assert FIRST_CUDA_CALL in log and f", GPUs {standin.uuids[1]}" in log
    assert standin.uuids[0] not in log.split(busy, 1)[1], "the rank never sees GPU 0"


def test_a_one_gpu_machine_whose_exclusive_gpu_another_process_holds_refuses_the_run_before_training(tmp_path):
    standin = StandIn(tmp_path / "gpus", count=1, processes={0: [(4242, 2)]}, compute_mode={0: "EXCLUSIVE_PROCESS"})
    flow = flow_in(tmp_path / "flow", ONE_GPU)
    env = standin.env(subprocess_env(), visible=None)
    refused = flow.run(*trained("base"), check=False, env=env, wrap=standin.command)
    assert refused.returncode != 0
    log = (flow.directory / "logs/train/base.log").read_text()
    (line,) = [line for line in log.splitlines() if "HINT:" in line]
    assert line == (
        "snakeddp.launch: the run's 1 rank needs 1 GPU of its own, and of the 1 this machine shows 1 is busy with "
        f"other work: GPU 0 (NVIDIA A100-SXM4-40GB, {standin.uuids[0]}) busy: EXCLUSIVE_PROCESS mode, and pid 4242 "
        "holds it (2 of 40 GiB). HINT: run it again when the GPU is free (nvidia-smi lists the processes on it)."
    ), log[-3000:]
    assert FIRST_CUDA_CALL not in log and "Traceback" not in log
    assert line in refused.stderr.splitlines(), refused.stderr[-3000:]
    # What the HINT says: once the other process has ended, the same command trains on the GPU.
    standin.processes = {}
    standin.write_use()
    flow.run(*trained("base"), check=False, env=env, wrap=standin.command)
    log = (flow.directory / "logs/train/base.log").read_text()
    assert FIRST_CUDA_CALL in log and f", GPUs {standin.uuids[0]}" in log, log[-3000:]


def test_runs_of_two_checkouts_on_one_machine_hold_different_gpus_at_once(tmp_path: Path):
    """Two users' (or two clones') workflows started together on a two-GPU workstation."""
    standin = StandIn(tmp_path / "gpus", count=2)
    flows = [flow_in(tmp_path / name, ONE_GPU) for name in ("alice", "bob")]
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    # Each rank waits at its first CUDA call until both are there: the runs hold their GPUs at once.
    env = {**standin.env(subprocess_env(), visible=None), "SNAKEDDP_STANDIN_MEET": f"{meeting}:2"}
    with ThreadPoolExecutor(2) as both:
        list(both.map(lambda flow: flow.run(*trained("base"), check=False, env=env, wrap=standin.command), flows))
    held = sorted(path.read_text() for path in meeting.iterdir())
    assert held == sorted(standin.uuids), held


def test_in_a_one_gpu_allocation_of_a_four_gpu_node_the_one_rank_run_is_given_the_allocated_gpu(tmp_path: Path):
    """`snakemake --profile local` in an salloc shell given GPU 2 of a 4-GPU node: Slurm sets
    CUDA_VISIBLE_DEVICES=0, and the step's device cgroup denies GPUs 0, 1 and 3 (NVML answers NO_PERMISSION for
    them, their /dev nodes do not open, CUDA enumerates GPU 2 alone)."""
    standin = StandIn(tmp_path / "node", count=4, denied=(0, 1, 3))
    flow = flow_in(tmp_path / "flow", SWEEP)
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    # The rank leaves the GPUs it was given where it reaches CUDA's initialisation.
    env = {**standin.env(subprocess_env(), visible="0"), "SNAKEDDP_STANDIN_MEET": f"{meeting}:1"}
    done = flow.run(*trained("devices-1"), check=False, env=env, wrap=standin.command)
    # The plan says so of the other run.
    note = (
        "snakeddp: run devices-2: 2 ranks, and this machine shows 1 GPU (NVIDIA A100-SXM4-40GB; 3 more of the host's "
        "denied to this process): launch.accelerator auto trains it on the CPU"
    )
    assert planned_before_any_job(note, done), done.stderr[-3000:]
    log = (flow.directory / "logs/train/devices-1.log").read_text()
    assert [path.read_text() for path in meeting.iterdir()] == [standin.uuids[2]], log[-3000:]
    assert FIRST_CUDA_CALL in log and f", GPUs {standin.uuids[2]}" in log and "HINT:" not in log, log[-3000:]


def test_after_a_driver_upgrade_without_a_reboot_auto_plans_the_cpu_and_gpu_is_refused_in_nvmls_words(tmp_path):
    """NVML answers "Driver/library version mismatch" (CUDA would fail alike) while /proc and /dev show the GPU."""
    standin = StandIn(tmp_path / "gpus", count=1, nvml_init=18)
    flow, env = one_rank_auto(standin, tmp_path)
    planned = flow.run("-n", env=env, wrap=standin.command)
    (line,) = hints(planned)
    assert line == (
        'snakeddp: run base: 1 rank, and this machine shows no GPU this process can use (NVML answers "Driver/'
        "library version mismatch\"; the host's driver lists 1): launch.accelerator auto trains it on the CPU "
        "(launch.accelerator: gpu would refuse it instead). HINT: reboot the machine (or reload the NVIDIA kernel "
        "modules): the driver was upgraded and the kernel still runs the old one, or set launch.accelerator: cpu."
    ), planned.stderr
    # What the HINT says: launch.accelerator: cpu plans the same without a word; gpu is refused before any job.
    assert not hints(flow.run("-n", "--config", "launch={accelerator: cpu}", env=env, wrap=standin.command))
    refused = flow.run("-n", "--config", "launch={accelerator: gpu}", check=False, env=env, wrap=standin.command)
    (line,) = hints(refused)
    assert refused.returncode != 0 and 'NVML answers "Driver/library version mismatch"' in line, line
    assert "HINT: reboot the machine (or reload the NVIDIA kernel modules)" in line
    # A reboot: the same machine's NVML answers again, and auto plans the GPU.
    rebooted = StandIn(tmp_path / "rebooted", count=1)
    assert not hints(flow.run("-n", env=rebooted.env(subprocess_env(), visible=None), wrap=rebooted.command))


def test_an_nvml_that_never_answers_blocks_neither_the_plan_nor_the_ranks_and_is_named(tmp_path: Path):
    """A GPU fallen off the bus blocks nvmlInit (here for 600 s, in every process that asks): each process gives
    NVML the seconds SNAKEDDP_NVML_TIMEOUT_S says (1 here: five processes ask, the Snakefile's reads, the
    environment step, the launcher and the rank, and 5 s each, the default tests/util/test_gpus.py waits out,
    was 25 s of this test), says so, and the run trains on the CPU."""
    standin = StandIn(tmp_path / "gpus", count=1, nvml_slow_s=600)
    flow, env = one_rank_auto(standin, tmp_path)
    refused = flow.run("-n", check=False, env={**env, gpus.NVML_TIMEOUT_VARIABLE: "0"}, wrap=standin.command)
    (line,) = hints(refused)
    assert refused.returncode != 0 and line == (
        "SNAKEDDP_NVML_TIMEOUT_S='0' is not a number of seconds above 0 (how long each process waits for NVML's "
        "answer). HINT: set it to one, e.g. SNAKEDDP_NVML_TIMEOUT_S=5, or unset it"
    ), refused.stderr[-3000:]
    # What the HINT says: a number of seconds.
    env[gpus.NVML_TIMEOUT_VARIABLE] = "1"
    line, trained = trained_with_its_line(flow, env, standin)
    assert line.startswith(
        "snakeddp: run base: 1 rank, and this machine shows no GPU this process can use (NVML did not answer within "
        "1 s; the host's driver lists 1): launch.accelerator auto trains it on the CPU"
    ), line
    assert "HINT: check the GPUs with nvidia-smi" in line and line.endswith("or set launch.accelerator: cpu."), line
    assert trained["launch"]["accelerator"] == "cpu"
    # What the HINT says: launch.accelerator: cpu plans the same without a word.
    assert not hints(flow.run("-n", "--config", "launch={accelerator: cpu}", env=env, wrap=standin.command))
