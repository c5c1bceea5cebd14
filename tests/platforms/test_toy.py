"""The toy platform (tests/platforms/toy: a package outside snakeddp, registered by its entry point as an
installed one is) passes what every platform must (tests/platforms/conformance.py), through
`snakemake --profile` as typed. It is docs/development.md's "A new platform, step by step", followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.checkout import Checkout
from tests.helpers import REPO, subprocess_env
from tests.platforms.conformance import Conformance

pytestmark = pytest.mark.e2e

TOY = Path(__file__).parent / "toy"


class TestToy(Conformance):
    platform = "toy"
    refused_config = "launch={nodes: 2}"
    refused_says = "the toy platform has one node. HINT: set launch.nodes: 1."
    node_variable = "TOY_NODE"

    @classmethod
    def profile(cls, checkout: Checkout) -> Path:
        # Step 4: its profile, the local one's with its own platform.
        profile = checkout.root / "toy-profile"
        profile.mkdir()
        local = (REPO / "profiles" / "local" / "config.yaml").read_text()
        assert "platform=local" in local
        (profile / "config.yaml").write_text(local.replace("platform=local", "platform=toy"))
        return profile

    @classmethod
    def environment(cls, checkout: Checkout) -> dict[str, str]:
        # Installed as a wheel would be: its package and its dist-info (the entry point) on the path.
        env = subprocess_env()
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(TOY)])
        return env
