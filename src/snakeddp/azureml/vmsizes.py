"""A compute cluster's VM size against what a run asks of each node, checked when its job is about to be
submitted (before the image is built, anything is uploaded or a node provisioned): a GPU run on a VM size
without GPUs, or with fewer than its ranks per node (``launch.devices``), would otherwise fail in every rank
after all of that.

The size's GPUs are the workspace's word: ``compute.list_sizes()`` (SDK v2: ``VmSize.gpus``) or
``AmlCompute.supported_vmsizes`` (SDK v1: each size's ``gpus``), never a pattern of names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from snakeddp.azureml import AzureMLError


def gpus_of(size: str, sizes: Iterable[Any]) -> int | None:
    """The GPUs of VM size ``size`` among ``sizes`` (VmSize objects, or v1's dicts), None for a size not listed."""
    for listed in sizes:
        name = listed.get("name") if isinstance(listed, Mapping) else listed.name
        if name and name.lower() == size.lower():
            gpus = listed.get("gpus") if isinstance(listed, Mapping) else listed.gpus
            return int(gpus or 0)
    return None


def check(compute: str, size: str | None, sizes: Iterable[Any], devices: int, accelerator: str) -> None:
    """``accelerator`` (the run's, cpu or gpu) and ``devices`` ranks per node against the GPUs of the compute's
    VM size; nothing where the size is unknown."""
    gpus = gpus_of(size, sizes) if size else None
    if gpus is None:
        return
    where = f"compute {compute!r} is {size}, with {gpus} GPU{'s' if gpus != 1 else ''} per node"
    if accelerator == "gpu" and gpus < devices:
        fix = (
            f"set launch.devices to at most {gpus} (more launch.nodes for more ranks)"
            if gpus
            else ("set launch.accelerator: cpu")
        )
        raise AzureMLError(
            f"the run trains {devices} GPU rank{'s' if devices > 1 else ''} per node, and {where}: every rank past "
            f"them would fail after the image build and the nodes' provisioning. HINT: {fix}, or train on a "
            "compute of a GPU size with enough GPUs (azureml.compute; `az ml compute list-sizes` lists them with "
            "their gpus). Nothing was uploaded."
        )
