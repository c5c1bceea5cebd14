"""snakeddp.azureml.vmsizes: a compute's VM size against a run's GPU ranks per node, with the SDKs' own offline
objects: v2's VmSize made from the REST answer of `compute.list_sizes()` as the SDK makes it, and v1's
`AmlCompute.supported_vmsizes` entries as that call returns them (no workspace is reachable here)."""

from __future__ import annotations

import pytest
from azure.ai.ml._restclient.arm_ml_service.models import VirtualMachineSize
from azure.ai.ml.entities import AmlCompute, VmSize

from snakeddp.azureml import AzureMLError, vmsizes

# What GET .../locations/{location}/vmSizes answers, per size (a few of Azure's), as the REST model reads it.
LISTED = [
    {"name": "Standard_D4ds_v5", "family": "standardDDSv5Family", "vCPUs": 4, "gpus": 0, "memoryGB": 16.0},
    {"name": "Standard_NC24ads_A100_v4", "family": "StandardNCADSA100v4Family", "vCPUs": 24, "gpus": 1,
     "memoryGB": 220.0},
    {"name": "Standard_ND96isr_H100_v5", "family": "standardNDISRH100v5Family", "vCPUs": 96, "gpus": 8,
     "memoryGB": 1900.0},
]  # fmt: skip


@pytest.fixture
def sizes() -> list[VmSize]:
    """compute.list_sizes()'s answer: the SDK turns each REST size into a VmSize this way."""
    return [VmSize._from_rest_object(VirtualMachineSize(size)) for size in LISTED]


def test_the_sizes_gpus_are_the_workspaces_word(sizes):
    assert [vmsizes.gpus_of(size["name"], sizes) for size in LISTED] == [0, 1, 8]
    assert vmsizes.gpus_of("standard_nc24ads_a100_v4", sizes) == 1, "Azure's size names ignore case"
    assert vmsizes.gpus_of("Standard_Unlisted", sizes) is None


def test_more_gpu_ranks_per_node_than_the_size_has_are_refused_before_anything_is_uploaded(sizes):
    compute = AmlCompute(name="gpu-cluster", size="Standard_NC24ads_A100_v4", max_instances=2)
    with pytest.raises(AzureMLError) as refused:
        vmsizes.check(compute.name, compute.size, sizes, devices=2, accelerator="gpu")
    line = str(refused.value)
    assert line.startswith("the run trains 2 GPU ranks per node, and compute 'gpu-cluster' is Standard_NC24ads_A100_v4")
    assert "with 1 GPU per node" in line and "HINT: set launch.devices to at most 1" in line and "\n" not in line
    vmsizes.check(compute.name, compute.size, sizes, devices=1, accelerator="gpu")  # what the HINT says
    vmsizes.check(compute.name, compute.size, sizes, devices=8, accelerator="cpu")  # CPU ranks ask no GPU
    with pytest.raises(AzureMLError, match="with 0 GPUs per node.*HINT: set launch.accelerator: cpu"):
        vmsizes.check("cpu-cluster", "Standard_D4ds_v5", sizes, devices=1, accelerator="gpu")
    vmsizes.check("somewhere", "Standard_Unlisted", sizes, devices=4, accelerator="gpu")  # not the size's word


def test_sdk_v1s_supported_vmsizes_entries_are_read_the_same():
    """AmlCompute.supported_vmsizes(workspace) answers a list of dicts with 'name' and 'gpus'."""
    v1 = [{"name": "STANDARD_NC6S_V3", "vCPUs": 6, "gpus": 1, "memoryGB": 112.0, "maxResourceVolumeMB": 344064}]
    with pytest.raises(AzureMLError, match="is Standard_NC6s_v3, with 1 GPU per node"):
        vmsizes.check("v100s", "Standard_NC6s_v3", v1, devices=2, accelerator="gpu")
