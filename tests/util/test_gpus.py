"""snakeddp.util.gpus: the GPUs a process will see, without torch or CUDA: CUDA_VISIBLE_DEVICES applied as
torch parses it for CUDA, and the kernel module's files read where NVML does not answer (here: in this
process, NVML left unasked; tests/environment/test_cuda.py and tests/e2e/test_gpus.py meet NVML's answers
through the stand-in driver)."""

from __future__ import annotations

from pathlib import Path

import pytest

from snakeddp.util import gpus
from tests.gpu_standin import StandIn


@pytest.fixture
def machine(tmp_path: Path) -> tuple[Path, Path]:
    """A driver directory listing two A100s and one H100, as /proc/driver/nvidia lists them, and a /dev with
    each GPU's device node."""
    standin = StandIn(tmp_path / "a100", count=2)
    h100 = StandIn(tmp_path / "h100", count=3, model="NVIDIA H100 80GB HBM3")
    last = sorted((h100.root / "driver/nvidia/gpus").iterdir())[-1]
    last.rename(standin.root / "driver/nvidia/gpus/0000:c1:00.0")
    devices = tmp_path / "dev"
    devices.mkdir()
    for minor in (0, 1, 2):
        (devices / f"nvidia{minor}").touch()
    return standin.root / "driver" / "nvidia", devices


def models(env: dict, machine: tuple[Path, Path]) -> list[str]:
    return [gpu.model for gpu in gpus.apply_visible(gpus.driver(*machine, nvml=False), env)]


def test_every_gpu_the_driver_lists_in_bus_order_without_cuda_visible_devices(machine):
    assert models({}, machine) == ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]
    seen = gpus.driver(*machine, nvml=False)
    assert seen.version == "580.95.05" and seen.source == "proc" and seen.listed == 3
    assert gpus.describe({}, seen=seen) == "3 GPUs (NVIDIA A100-SXM4-40GB, NVIDIA H100 80GB HBM3)"


@pytest.mark.parametrize(
    "setting, shown",
    [
        ("", []),
        ("2", ["NVIDIA H100 80GB HBM3"]),
        ("2,0", ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]),
        ("0,7,1", ["NVIDIA A100-SXM4-40GB"]),  # the runtime stops at the first index that names no GPU
        ("-1", []),
        ("1,1", []),  # a repeated index hides every GPU (torch.cuda._parse_visible_devices)
        ("1gpu,2", ["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]),  # read as strtoul reads it
        ("GPU-00000002", ["NVIDIA H100 80GB HBM3"]),  # a unique prefix of a UUID
        ("GPU-00000002,0", ["NVIDIA H100 80GB HBM3"]),  # UUIDs up to the first entry that is none
        ("GPU-0000000", []),  # a prefix of several UUIDs names none
    ],
)
def test_cuda_visible_devices_is_applied_as_torch_parses_it_for_cuda(machine, setting, shown):
    assert models({"CUDA_VISIBLE_DEVICES": setting}, machine) == shown


def test_a_gpu_whose_device_node_is_absent_is_not_reachable_where_nvml_does_not_answer(machine, tmp_path):
    """A container without the GPUs, on a host whose /proc lists them: no NVML, no /dev/nvidia*."""
    driver, _ = machine
    seen = gpus.driver(driver, tmp_path / "container-dev", nvml=False)
    assert seen.enumerable() == [] and seen.listed == 3
    assert gpus.describe({}, seen=seen).startswith(
        "no GPU this process can reach (the host's driver lists 3, and no NVIDIA library or device reaches them"
    )


def test_what_a_message_says_of_hidden_gpus_and_of_a_machine_without_a_driver(machine, tmp_path):
    seen = gpus.driver(*machine, nvml=False)
    assert gpus.describe({"CUDA_VISIBLE_DEVICES": ""}, seen=seen) == (
        "no GPU visible (3 installed, CUDA_VISIBLE_DEVICES='' hides them)"
    )
    assert gpus.describe({"CUDA_VISIBLE_DEVICES": "1"}, seen=seen) == (
        "1 GPU (NVIDIA A100-SXM4-40GB; 2 more hidden by CUDA_VISIBLE_DEVICES='1')"
    )
    nothing = gpus.driver(tmp_path / "none", tmp_path / "none", nvml=False)
    assert gpus.describe({}, seen=nothing) == "no GPU (no NVIDIA driver lists one)" and nothing.version is None


def test_a_process_enumerates_one_mig_slice_of_those_it_may_see():
    slices = tuple(
        gpus.Gpu(f"0:{i}", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", f"MIG-{i}aaa", (8, 0), mig=True) for i in (1, 2)
    )
    seen = gpus.Driver("580.95.05", (), slices, listed=1, source="nvml")
    assert gpus.apply_visible(seen, {}) == [slices[0]]
    assert gpus.apply_visible(seen, {"CUDA_VISIBLE_DEVICES": "MIG-2,MIG-1"}) == [slices[1]]
    assert gpus.apply_visible(seen, {"CUDA_VISIBLE_DEVICES": "MIG-2,MIG-2"}) == []
    assert (
        gpus.describe({}, seen=seen)
        == "1 GPU (NVIDIA A100-SXM4-40GB MIG 1g.5gb; a process enumerates one MIG slice of the 2)"
    )
