"""Workflow settings that reach the training processes through the environment, not run.yaml.

``network.env`` (NCCL/gloo tuning) and ``tracking`` do not change what a run computes, so they
are not part of its identity: the workflow exports them when it starts (rules/common.smk), every
job inherits them, and changing them never reruns a job. The launcher passes the network
variables on to every rank; rank 0 reads the tracking section from ``SNAKEDDP_TRACKING``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from snakeddp.cluster import network
from snakeddp.config import validate
from snakeddp.errors import ConfigError

TRACKING_VAR = "SNAKEDDP_TRACKING"


def variables(config: Mapping[str, Any]) -> dict[str, str]:
    """The environment a validated config asks every job to run with."""
    return {**network.variables(config), TRACKING_VAR: json.dumps(config.get("tracking", {}), sort_keys=True)}


def tracking(env: Mapping[str, str]) -> dict[str, Any]:
    """The tracking section from the environment, validated with defaults (every tracker off when unset)."""
    try:
        raw = json.loads(env.get(TRACKING_VAR) or "{}")
    except ValueError as exc:
        raise ConfigError(f"{TRACKING_VAR} is not JSON: {exc}") from None
    return validate({"tracking": raw}, source=TRACKING_VAR)["tracking"]
