"""`snakemake --profile local` as typed on machines with GPUs, through stand-in GPUs (tests/gpu_standin.py:
the driver's directory in a mount namespace, torch's CUDA queries answering for it, the first CUDA call
failing): what the workflow plans and refuses, and what each rank checks before its first CUDA call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gpu_standin import StandIn
from tests.helpers import TINY, Workflow, subprocess_env

pytestmark = pytest.mark.e2e

# The default config's shape (a run of one rank and one of two, launch.accelerator auto), tiny.
SWEEP = {**TINY, "launch": {**TINY["launch"], "accelerator": "auto"}, "sweep": {"launch.devices": [1, 2]}}
FIRST_CUDA_CALL = "stand-in GPU: this is the first CUDA call"


def flow_in(directory: Path, config: dict) -> Workflow:
    directory.mkdir(parents=True)
    flow = Workflow(directory)
    flow.write_config(config)
    return flow


def hints(done) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if "HINT:" in line]


def test_one_gpu_trains_the_one_rank_run_on_it_and_the_two_rank_run_on_the_cpu(tmp_path: Path):
    standin = StandIn(tmp_path / "gpus", count=1)
    flow = flow_in(tmp_path / "flow", SWEEP)
    env = standin.env(subprocess_env(), visible=None)
    planned = flow.run("-n", env=env, wrap=standin.command)
    note = [line for line in planned.stderr.splitlines() if "trains it on the CPU" in line]
    assert note == [
        "snakeddp: run devices-2: 2 ranks, and this machine shows 1 GPU (NVIDIA A100-SXM4-40GB): launch.accelerator "
        "auto trains it on the CPU (launch.accelerator: gpu would refuse it instead)."
    ], planned.stderr
    assert not hints(planned)
    done = flow.run("--keep-going", check=False, env=env, wrap=standin.command)
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
    one = {**TINY, "launch": {**TINY["launch"], "accelerator": "gpu", "devices": 1}}
    flow = flow_in(tmp_path / "flow", one)
    refused = flow.run("-n", check=False, env=standin.env(subprocess_env(), visible=""), wrap=standin.command)
    (line,) = hints(refused)
    assert "this machine shows no GPU visible (2 installed, CUDA_VISIBLE_DEVICES='' hides them)" in line, line
    assert "HINT: leave CUDA_VISIBLE_DEVICES unset" in line
    # What the HINT says; and auto with the GPUs hidden plans the CPU, as it would train it.
    assert not hints(flow.run("-n", env=standin.env(subprocess_env(), visible=None), wrap=standin.command))
    flow.write_config({**one, "launch": {**one["launch"], "accelerator": "auto"}})
    hidden = flow.run("-n", env=standin.env(subprocess_env(), visible=""), wrap=standin.command)
    assert not hints(hidden) and "trains it on the CPU" not in hidden.stderr


def test_a_v100_under_the_cuda_13_build_stops_before_training_in_one_line_naming_both(tmp_path: Path):
    standin = StandIn(tmp_path / "gpus", count=1, capability="7.0", model="Tesla V100-SXM2-16GB")
    config = {**TINY, "launch": {**TINY["launch"], "accelerator": "gpu", "devices": 1}}
    flow = flow_in(tmp_path / "flow", config)
    done = flow.run(check=False, env=standin.env(subprocess_env(), visible=None), wrap=standin.command)
    assert done.returncode != 0
    log = (flow.directory / "logs/train/base.log").read_text()
    (line,) = [line for line in log.splitlines() if "HINT:" in line]
    assert "Tesla V100-SXM2-16GB on " in line and "has compute capability 7.0" in line, line
    assert "CUDA 13.0 build has kernels for 7.5" in line and 'environment.cuda: "12.6"' in line
    assert FIRST_CUDA_CALL not in log and "Traceback" not in log, log[-3000:]
    assert not (flow.directory / "results/runs/base/metrics.csv").exists(), "nothing trained"
