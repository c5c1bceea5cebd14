"""snakeddp.util.gpuload: the mean utilisation of a run's GPUs as NVML samples it, through the stand-in driver's
NVML (tests/gpu_standin/nvml.c) in a process of its own, as rank 0 samples it for a try's account."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.gpu_standin import StandIn
from tests.helpers import subprocess_env

# Samples the visible GPUs four times or more, and prints the mean and the count of samples.
SAMPLE = """
import os, sys, time
from snakeddp.util import gpus
from snakeddp.util.gpuload import Utilisation
load = Utilisation([gpu.uuid for gpu in gpus.visible(os.environ)], 0.05)
load.start()
while load.samples < 4:
    time.sleep(0.01)
load.stop()
print(load.mean(), load.samples)
"""


def sampled(standin: StandIn, visible: str | None) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", SAMPLE], env=standin.env(subprocess_env(), visible=visible), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    mean, samples = done.stdout.split()
    return mean, int(samples)


def test_the_mean_is_over_the_visible_gpus_as_nvml_answers(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=3, utilisation={0: 90, 1: 50, 2: 7})
    mean, samples = sampled(standin, visible="0,1")
    assert mean == "70.0" and samples >= 4  # GPU 2 is another job's: not sampled
    assert sampled(standin, visible="2")[0] == "7.0"


def test_a_mig_slice_that_does_not_answer_gives_no_mean_rather_than_zero(tmp_path: Path):
    standin = StandIn(tmp_path / "m", count=1, mig=2)
    done = subprocess.run(
        [sys.executable, "-c", SAMPLE.replace("while load.samples < 4:", "for _ in range(30):")],
        env=standin.env(subprocess_env(), visible=standin.mig_uuids[0]), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "0"]
