"""snakeddp.databricks.nodes: what the nodes a run trains on have, asked through databricks-sdk's own client
of the local workspace stub (tests/databricks_server.py), whose node types carry their num_gpus as the REST
API's list-node-types does; and `snakemake --profile databricks` deciding auto from them, as typed."""

from __future__ import annotations

import pytest
from databricks.sdk import WorkspaceClient

from snakeddp import config
from snakeddp.config.parts import Launch
from snakeddp.databricks import DatabricksError, nodes
from snakeddp.databricks.settings import Settings
from tests.databricks.test_submit import CONFIG, TOKEN, user_env
from tests.helpers import Workflow

pytestmark = pytest.mark.dev_venv  # the databricks profile imports databricks-sdk

GPU_RUNTIME = "16.4.x-gpu-ml-scala2.12"


@pytest.fixture
def client(stub) -> WorkspaceClient:
    return WorkspaceClient(host=stub.url, token=TOKEN)


def section(**given) -> Settings:
    return Settings.of(config.validate({"databricks": {"stage": "/Volumes/main/ml/snakeddp", **given}})["databricks"])


@pytest.mark.parametrize(
    ("node_type", "gpus"),
    [("p6-b200.48xlarge", 8), ("gr6.4xlarge", 1), ("Standard_NC24ads_A100_v4", 1), ("i3.xlarge", 0)],
)
def test_a_node_types_gpus_are_the_workspaces_word_not_its_name(client, node_type, gpus):
    found = nodes.of_section(client, section(new_cluster={"spark_version": GPU_RUNTIME, "node_type_id": node_type}))
    assert (found.node_type, found.gpus) == (node_type, gpus)
    assert found.accelerator == ("gpu" if gpus else "cpu")


def test_an_existing_cluster_is_asked_for_its_node_type_and_an_unknown_one_is_one_line(stub, client):
    stub.existing("0101-000000-mine", "i3.xlarge")
    found = nodes.of_section(client, section(existing_cluster_id="0101-000000-mine"))
    assert (found.node_type, found.gpus, found.named_by) == ("i3.xlarge", 0, "the existing cluster 0101-000000-mine")
    with pytest.raises(DatabricksError) as refused:
        nodes.of_section(client, section(new_cluster={"spark_version": GPU_RUNTIME, "node_type_id": "x9.huge"}))
    assert "node type x9.huge, which this workspace does not offer. HINT:" in str(refused.value)


def test_more_gpu_ranks_per_node_than_its_gpus_are_refused_and_the_hint_fits(client):
    one = nodes.of_section(client, section(new_cluster={"spark_version": GPU_RUNTIME, "node_type_id": "g5.xlarge"}))
    two = Launch.of(config.validate({"launch": {"devices": 2}})["launch"])
    with pytest.raises(DatabricksError) as refused:
        nodes.check_runs(one, {"devices-2": (two, "gpu")})
    line = str(refused.value)
    assert line.startswith("run devices-2 trains 2 GPU ranks per node, and databricks.new_cluster.node_type_id is")
    assert "g5.xlarge, with 1 GPU. HINT: set launch.devices to at most 1" in line
    fits = Launch.of(config.validate({"launch": {"devices": 1}})["launch"])
    nodes.check_runs(one, {"devices-1": (fits, "gpu"), "on-cpu": (two, "cpu")})
    none = nodes.Nodes("i3.xlarge", 0, "the existing cluster c")
    with pytest.raises(DatabricksError, match="HINT: set launch.accelerator: cpu"):
        nodes.check_runs(none, {"devices-1": (fits, "gpu")})


@pytest.mark.e2e
def test_the_profile_decides_auto_from_the_node_types_gpus_without_a_declaration(stub, tmp_path):
    """`snakemake --profile databricks -n` with the workspace's credentials: auto is gpu on a node type with GPUs
    (one line says so), cpu on one without; two ranks on a one-GPU node type are refused before any job."""
    flow = Workflow(tmp_path / "flow", profile="databricks")
    flow.directory.mkdir()
    auto = {**CONFIG["launch"], "accelerator": "auto", "devices": 1}
    on = {"spark_version": GPU_RUNTIME, "node_type_id": "gr6.4xlarge"}
    section = {**CONFIG["databricks"], "new_cluster": on}
    flow.write_config({**CONFIG, "launch": auto, "sweep": {}, "databricks": section})
    planned = flow.run("-n", env=user_env(stub))
    decided = [line for line in planned.stderr.splitlines() if "auto on Databricks" in line]
    assert decided == [
        "snakeddp: launch.accelerator auto on Databricks means gpu (databricks.new_cluster.node_type_id is node "
        "type gr6.4xlarge, with 1 GPU)."
    ], planned.stderr[-3000:]
    refused = flow.run("--config", "launch={devices: 2}", env=user_env(stub), check=False)
    lines = [line for line in (refused.stdout + refused.stderr).splitlines() if "HINT:" in line]
    assert refused.returncode != 0 and len(lines) == 1 and "trains 2 GPU ranks per node" in lines[0], lines
    assert not stub.requests("POST", "/api/2.2/jobs/runs/submit"), "nothing was submitted"
