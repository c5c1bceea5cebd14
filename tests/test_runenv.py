"""Settings outside a run's identity (network.env, tracking) travel to the training processes in the environment."""

from __future__ import annotations

import json

import pytest

from snakeddp import config
from snakeddp.run import variables as runenv


def test_tracking_travels_in_the_environment_with_defaults():
    cfg = config.validate({"tracking": {"mlflow": {"enabled": True}}})
    env = runenv.variables(cfg)
    assert runenv.tracking(env) == cfg["tracking"]
    assert runenv.tracking({}) == config.validate({})["tracking"], "unset means every tracker off"
    with pytest.raises(config.ConfigError, match="SNAKEDDP_TRACKING"):
        runenv.tracking({runenv.TRACKING_VAR: '{"mlflow": {"enabled": "yes"}}'})


def test_network_and_tracking_share_one_environment():
    cfg = config.validate({"network": {"env": {"NCCL_DEBUG": "WARN"}}})
    env = runenv.variables(cfg)
    assert env["NCCL_DEBUG"] == "WARN"
    assert json.loads(env[runenv.TRACKING_VAR]) == cfg["tracking"]
