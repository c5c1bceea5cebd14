"""The base image of AzureML's image environment: read from its name, checked against the torch build."""

import pytest

from snakeddp.azureml import images
from snakeddp.azureml.settings import AzureMLError, Settings
from snakeddp.environment.builds import BUILDS
from snakeddp.environment.files import ENVS, build_lock

# Names as their publishers write them: AzureML's list (Azure/AzureML-Containers' README), NVIDIA's
# CUDA and framework images, PyTorch's, an AzureML curated environment's image, a pinned digest.
NAMES = [
    ("mcr.microsoft.com/azureml/openmpi5.0-cuda13.1-ubuntu24.04:latest", "13.1"),
    ("mcr.microsoft.com/azureml/openmpi5.0-cuda12.6-ubuntu24.04:20250701.v1", "12.6"),
    ("mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04@sha256:" + "0" * 64, "11.8"),
    ("mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.0.3-cudnn8-ubuntu18.04", "11.0"),
    ("docker://nvcr.io/nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04", "13.0"),
    ("docker.io/nvidia/cuda:12.6.3-base-ubuntu24.04", "12.6"),
    ("docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "12.4"),
    ("mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:3", "12.1"),
    ("mcr.microsoft.com/azureml/openmpi5.0-ubuntu24.04:20250701.v1", None),
    ("nvcr.io/nvidia/pytorch:25.01-py3", None),
    ("myregistry.azurecr.io/team/cudatools:1.2", None),
]


@pytest.mark.parametrize(("image", "cuda"), NAMES)
def test_the_cuda_version_is_read_from_the_name(image, cuda):
    assert images.cuda_of(image) == cuda


@pytest.mark.parametrize(
    ("image", "cuda", "agrees"),
    [
        ("mcr.microsoft.com/azureml/openmpi5.0-cuda13.1-ubuntu24.04:latest", "13.0", True),
        ("mcr.microsoft.com/azureml/openmpi5.0-cuda13.1-ubuntu24.04:latest", "13.2", True),
        ("mcr.microsoft.com/azureml/openmpi5.0-cuda12.6-ubuntu24.04:20250701.v1", "13.0", False),
        ("mcr.microsoft.com/azureml/openmpi5.0-cuda12.8-ubuntu24.04:latest", "12.6", True),
        ("mcr.microsoft.com/azureml/openmpi5.0-cuda13.1-ubuntu24.04:latest", "12.6", False),
        ("mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04", "12.6", False),
        # The CPU build needs no driver; a name without CUDA cannot be checked and is taken as given.
        ("mcr.microsoft.com/azureml/openmpi5.0-cuda12.6-ubuntu24.04:20250701.v1", "cpu", True),
        ("myregistry.azurecr.io/team/trainer:2026-05-01", "13.0", True),
    ],
)
def test_a_configured_image_must_be_of_the_builds_cuda_major(image, cuda, agrees):
    settings = Settings.from_section({"environment": {"image": image}})
    if agrees:
        assert settings.base_image(cuda) == image
        return
    with pytest.raises(AzureMLError, match=r"is a CUDA \d+\.\d+ image, but environment.cuda=.*HINT: set azureml"):
        settings.base_image(cuda)


def test_the_hint_names_a_build_that_fits_the_image_only_where_there_is_one():
    settings = Settings.from_section({"environment": {"image": "nvcr.io/nvidia/cuda:11.8.0-base-ubuntu22.04"}})
    with pytest.raises(AzureMLError) as refused:
        settings.base_image("12.6")
    assert "525.60.13" in str(refused.value) and "to keep this image" not in str(refused.value)


def test_the_hint_offers_a_build_that_fits_the_image_only_where_this_checkout_can_install_it():
    """A CUDA 12 image under the 13.0 build: the 12.6 build would fit it, and its lock has no hashes here (every
    installer, AzureML's image environment included, refuses it), so the line says how a maintainer locks it;
    the 13.0 build, which is locked, is offered to keep a CUDA 13 image."""
    cuda12 = Settings.from_section(
        {"environment": {"image": "mcr.microsoft.com/azureml/openmpi5.0-cuda12.6-ubuntu24.04"}}
    )
    with pytest.raises(AzureMLError) as refused:
        cuda12.base_image("13.0")
    line = str(refused.value)
    if build_lock(BUILDS["12.6"], ENVS) is None:
        assert 'set environment.cuda: "12.6"' not in line and "once a maintainer locks it: tools/lock.sh where" in line
    else:
        assert 'or set environment.cuda: "12.6" to keep this image' in line
    cuda13 = Settings.from_section(
        {"environment": {"image": "mcr.microsoft.com/azureml/openmpi5.0-cuda13.1-ubuntu24.04"}}
    )
    with pytest.raises(AzureMLError) as refused:
        cuda13.base_image("12.6")
    locked = " or ".join(f'"{cuda}"' for cuda in ("13.0", "13.2") if build_lock(BUILDS[cuda], ENVS) is not None)
    assert f"or set environment.cuda: {locked} to keep this image" in str(refused.value)


def test_other_sources_bring_their_own_software():
    registered = Settings.from_section({"environment": {"source": "registered", "registered": "azureml:env:1"}})
    assert registered.base_image("13.0") is None
