"""`snakemake --profile local` under a 570 driver (stand-in GPUs, tests/gpu_standin.py): every HINT of the refusal
names something this checkout can carry out, and each of them, typed as the line gives it, does what it says.
(The driver update cannot be typed here; the 12.6 build is not offered: its lock has no hashes in this checkout.)"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.gpu_standin import StandIn
from tests.helpers import TINY, Workflow, subprocess_env

pytestmark = [pytest.mark.e2e, pytest.mark.dev_venv]  # the GPU stand-in covers the dev venv's torch

ONE_GPU = {**TINY, "launch": {**TINY["launch"], "accelerator": "gpu", "devices": 1}}


def test_under_a_570_driver_each_command_the_hint_names_plans_or_trains_the_run(tmp_path: Path):
    standin = StandIn(tmp_path / "gpus", count=1, driver="570.86.15")
    (tmp_path / "flow").mkdir()
    flow = Workflow(tmp_path / "flow")
    flow.write_config(ONE_GPU)
    env = standin.env(subprocess_env(), visible=None)
    refused = flow.run(check=False, env=env, wrap=standin.command)
    (line,) = [line for line in (refused.stdout + refused.stderr).splitlines() if "HINT:" in line]
    assert refused.returncode != 0 and "install the CUDA" not in line and "tools/setup.sh" not in line, line
    # The HINT's two settings, each as a --config the line spells out.
    assert 'environment={cuda_forward_compat: true}")' in line, line
    assert "or set launch.accelerator: cpu (the CUDA 12.6 build would serve it" in line, line
    declared = re.search(r'--config "([^"]+)"', line).group(1)

    # Forward compatibility declared: planned on the GPU, and the rank passes every check before CUDA. The stand-in
    # host has no cuda-compat, so CUDA's own first call then says what it says there (on a host with it, it runs).
    flow.run("--config", declared, check=False, env=env, wrap=standin.command)
    log = (flow.directory / "logs/train/base.log").read_text()
    assert "snakeddp: 1 rank(s) on NVIDIA A100-SXM4-40GB, compute capability 8.0, CUDA 13.0 build" in log, log[-3000:]
    assert "RuntimeError: The NVIDIA driver on your system is too old (found version 12080)" in log, log[-3000:]
    assert "HINT:" not in log, log[-3000:]

    # launch.accelerator: cpu: it trains, on the CPU.
    flow.run("--config", "launch={accelerator: cpu}", env=env, wrap=standin.command)
    trained = json.loads((flow.directory / "results/runs/base/provenance.json").read_text())
    assert trained["launch"]["accelerator"] == "cpu", shlex.join(["--config", "launch={accelerator: cpu}"])
