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

from snakeddp.util import yamltext
from snakeddp.util.fsutil import read_json
from tests.checkout import Checkout
from tests.helpers import REPO, subprocess_env
from tests.platforms.conformance import Conformance, Finished, pipeline

pytestmark = pytest.mark.e2e

TOY = Path(__file__).parent / "toy"
#: The name the toy's own setting, toy.node, gives its queue's one node.
NODE = "toy-node-7"


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
    # The toy's own setting (its section, toy:, which config/schema.yaml does not hold), typed with --config.
    return pipeline(checkout, toy_profile(checkout), toy_env(), "launch={nodes: 2}", config=(f"toy={{node: {NODE}}}",))


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


def test_the_toys_own_setting_typed_with_config_reaches_its_job_the_schema_file_unchanged(finished: Finished) -> None:
    """A plugin brings its section (snakeddp_toy.settings: its part and schema): `--config toy={node: NAME}`
    validates, the train job reads it from what the workflow hands it, and its queue places the ranks on that
    node, which provenance records; the checkout's config/schema.yaml, snakeddp's, names no toy section."""
    run_dir = finished.directory / "results" / "runs" / "base"
    assert read_json(run_dir / "toy" / "request.json")["node"] == NODE
    record = json.loads((run_dir / "provenance.json").read_text())
    assert record["launch"]["variables"]["TOY_NODE"] == NODE
    assert {rank["node"] for rank in record["launch"]["ranks"]} == {NODE}
    schema_file = finished.directory / "config" / "schema.yaml"
    assert schema_file.read_bytes() == (REPO / "config" / "schema.yaml").read_bytes()
    assert "toy" not in yamltext.safe_load(schema_file.read_text())["properties"]
