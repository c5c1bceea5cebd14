"""Settings outside a run's identity (network.env, tracking) travel to the training processes in the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from snakeddp import config
from snakeddp.config import parts
from snakeddp.run import variables as runenv
from snakeddp.slurm import SLURM_CONF_COPY
from snakeddp.workflow import jobenv
from tests.helpers import REPO, subprocess_env


def test_tracking_travels_in_the_environment_with_defaults():
    cfg = config.validate({"tracking": {"mlflow": {"enabled": True}}})
    env = jobenv.settings(cfg)
    assert runenv.tracking(env) == parts.Tracking.of(cfg["tracking"])
    assert runenv.tracking({}) == parts.Tracking.of(config.validate({})["tracking"]), "unset means every tracker off"
    with pytest.raises(config.ConfigError, match="SNAKEDDP_TRACKING"):
        runenv.tracking({runenv.TRACKING: '{"mlflow": {"enabled": "yes"}}'})


def test_network_and_tracking_share_one_environment():
    cfg = config.validate({"network": {"env": {"NCCL_DEBUG": "WARN"}}})
    env = jobenv.settings(cfg)
    assert env["NCCL_DEBUG"] == "WARN"
    assert json.loads(env[runenv.TRACKING]) == cfg["tracking"]


def test_the_workflow_exports_what_every_job_needs_in_one_mapping(tmp_path):
    lock = tmp_path / "requirements.lock"
    cfg = config.validate({"platform": "slurm"})
    env = {"PATH": "/usr/bin", "PYTHONPATH": "/site", "SLURM_CONF": "/tmp/slurm.conf"}
    out = jobenv.exports(cfg, env, src="/repo/src", lock_file=lock, python_bin="/venv/bin", checkout=Path("/repo"))
    assert out["PYTHONPATH"] == os.pathsep.join(["/repo/src", "/site"])
    assert out["PATH"] == os.pathsep.join(["/repo/profiles/slurm/bin", "/venv/bin", "/usr/bin"]), "srun wrapper first"
    assert (out[runenv.PLATFORM], out[SLURM_CONF_COPY], out[runenv.LOCK]) == (
        "slurm",
        env["SLURM_CONF"],
        str(lock),
    )
    assert runenv.TRACKING in out and runenv.PLATFORM_SECTION not in out
    # A conda env or container brings its own python; the local platform needs no srun wrapper.
    local = jobenv.exports(
        config.validate({}), env, src="/repo/src", lock_file=lock, python_bin=None, checkout=Path("/x")
    )
    assert "PATH" not in local and SLURM_CONF_COPY not in local
    azure = config.validate({"platform": "azureml", "azureml": {"compute": "cpu-cluster"}})
    exported = jobenv.exports(azure, {}, src="/s", lock_file=lock, python_bin=None, checkout=Path("/x"))
    assert json.loads(exported[runenv.PLATFORM_SECTION]) == azure["azureml"]


def test_a_step_started_outside_the_workflow_is_told_how_to_name_the_lock(tmp_path):
    step = [sys.executable, "-m", "snakeddp.steps", "environment", "--stage", "data", "--out", str(tmp_path / "e.json")]
    env = {k: v for k, v in subprocess_env().items() if k != runenv.LOCK}
    refused = subprocess.run(step, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "HINT:" in refused.stderr, refused.stderr
    followed = subprocess.run(
        step, cwd=REPO, env={**env, runenv.LOCK: "envs/requirements.lock"}, capture_output=True, text=True, check=False
    )
    assert followed.returncode == 0, followed.stderr
    assert json.loads((tmp_path / "e.json").read_text())["stage"] == "data"
