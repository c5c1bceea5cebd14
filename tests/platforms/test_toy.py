"""The toy platform (tests/platforms/toy: a package outside snakeddp, registered by its entry point as an
installed one is) passes what every platform must (tests/platforms/conformance.py), through
`snakemake --profile` as typed. It is docs/development.md's "A new platform, step by step", followed: a
remote platform whose train job submits the run to a queue (a detached process on this machine) and follows
it, every rank running snakeddp.remote.entry from the staged code snapshot."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from snakeddp.util.fsutil import read_json
from tests.checkout import Checkout
from tests.helpers import REPO, subprocess_env
from tests.platforms.conformance import Conformance, Finished, pipeline

pytestmark = pytest.mark.e2e

TOY = Path(__file__).parent / "toy"


def toy_profile(checkout: Checkout) -> Path:
    """Step 4: its profile, the local one's with its own platform."""
    profile = checkout.root / "toy-profile"
    profile.mkdir()
    local = (REPO / "profiles" / "local" / "config.yaml").read_text()
    assert "platform=local" in local
    (profile / "config.yaml").write_text(local.replace("platform=local", "platform=toy"))
    return profile


def toy_env() -> dict[str, str]:
    """Installed as a wheel would be: its package and its dist-info (the entry point) on the path."""
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(TOY)])
    return env


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Finished:
    checkout = Checkout(tmp_path_factory.mktemp("toy"))
    return pipeline(checkout, toy_profile(checkout), toy_env(), "launch={nodes: 2}")


class TestToy(Conformance):
    platform = "toy"
    refused_says = "the toy platform has one node. HINT: set launch.nodes: 1."
    node_variable = "TOY_NODE"


def test_the_run_was_a_queued_job_whose_ranks_ran_the_staged_snapshot(finished: Finished) -> None:
    """What makes the toy remote: the run came back from the queue's job, whose ranks ran the entry from the
    code snapshot with what the request said the job inherits, not the workflow's environment."""
    run_dir = finished.directory / "results" / "runs" / "base"
    toy = run_dir / "toy"
    kept, request = read_json(toy / "submission.json"), read_json(toy / "request.json")
    assert (kept["status"], kept["collected"], kept["codes"]) == ("Completed", True, [0]), kept
    assert request["cwd"] == str(toy / "code") and request["command"][1:4] == ["-m", "snakeddp.remote.entry", "train"]
    record = json.loads((run_dir / "provenance.json").read_text())
    assert record["launch"]["launcher"] == "env" and record["launch"]["job_id"] == kept["job"]
    assert record["code"]["source"] == "submitter", "the snapshot has no .git: the commit is the submitter's"
    variables = record["launch"]["variables"]
    assert variables["TOY_JOB"] == kept["job"]
