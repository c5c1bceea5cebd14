"""snakeddp.util.gpus: the GPUs a process will see, from the driver's directory and CUDA_VISIBLE_DEVICES
as the CUDA runtime applies it, without torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from snakeddp.util import gpus
from tests.gpu_standin import StandIn


@pytest.fixture
def driver(tmp_path: Path) -> Path:
    """A driver directory listing two A100s and one H100, as /proc/driver/nvidia lists them."""
    standin = StandIn(tmp_path / "a100", count=2)
    h100 = StandIn(tmp_path / "h100", count=3, model="NVIDIA H100 80GB HBM3")
    last = sorted((h100.root / "driver/nvidia/gpus").iterdir())[-1]
    last.rename(standin.root / "driver/nvidia/gpus/0000:c1:00.0")
    return standin.root / "driver" / "nvidia"


def models(env: dict, driver: Path) -> list[str]:
    return [gpu.model for gpu in gpus.visible(env, driver)]


def test_every_gpu_the_driver_lists_in_bus_order_without_cuda_visible_devices(driver):
    assert models({}, driver) == ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]
    assert gpus.driver_version(driver) == "580.95.05"
    assert gpus.describe({}, driver) == "3 GPUs (NVIDIA A100-SXM4-40GB, NVIDIA H100 80GB HBM3)"


@pytest.mark.parametrize(
    "setting, shown",
    [
        ("", []),
        ("2", ["NVIDIA H100 80GB HBM3"]),
        ("2,0", ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]),
        ("0,7,1", ["NVIDIA A100-SXM4-40GB"]),  # the runtime stops at the first index that names no GPU
        ("-1", []),
        ("1,1", ["NVIDIA A100-SXM4-40GB"]),
        ("GPU-00000002", ["NVIDIA H100 80GB HBM3"]),  # a unique prefix of a UUID
        ("GPU-0000000", []),  # a prefix of several UUIDs names none
    ],
)
def test_cuda_visible_devices_is_applied_as_the_runtime_applies_it(driver, setting, shown):
    assert models({"CUDA_VISIBLE_DEVICES": setting}, driver) == shown


def test_what_a_message_says_of_hidden_gpus_and_of_a_machine_without_a_driver(driver, tmp_path):
    assert gpus.describe({"CUDA_VISIBLE_DEVICES": ""}, driver) == (
        "no GPU visible (3 installed, CUDA_VISIBLE_DEVICES='' hides them)"
    )
    assert gpus.describe({"CUDA_VISIBLE_DEVICES": "1"}, driver) == (
        "1 GPU (NVIDIA A100-SXM4-40GB; 2 more hidden by CUDA_VISIBLE_DEVICES='1')"
    )
    assert gpus.describe({}, tmp_path / "none") == "no GPU (no NVIDIA driver lists one)"
    assert gpus.driver_version(tmp_path / "none") is None
