"""The base image of ``azureml.environment.source: image``, and whether it fits the torch build.

torch's wheels bring their own CUDA libraries; the node brings the driver, and a CUDA 13 build
needs a driver of the CUDA 13 line (580 or newer). AzureML's GPU images have been built on
NVIDIA's CUDA images (their last published Dockerfiles start ``FROM nvcr.io/nvidia/cuda``), whose
container runtime check asks the node for a driver of the image's CUDA. A CUDA 12.x image on a
node with a CUDA 12 driver therefore starts, and the 13.0 wheel in it sees no GPU; with the
image's CUDA major equal to the build's, the image asks for the driver the build needs.

So the default follows ``environment.cuda`` (one image per build, below), and a configured image
whose name says another CUDA major is refused before anything is uploaded. A name that says no
CUDA version (a CPU image, a custom one) cannot be checked and is used as given; the CPU build
runs on any image.

The images are the OpenMPI 5.0.6 / Ubuntu 24.04 ones of Azure/AzureML-Containers' list of
supported images (README.md, refreshed 2026-03-16). The CUDA 12.6 and CPU ones carry the newest
dated tag of their release notes (2025-07-01); the CUDA 13.1 image was added after the
repository stopped listing tags, so it is ``latest`` until a dated tag is pinned (docs/azureml.md).
"""

from __future__ import annotations

import re

from snakeddp.azureml import AzureMLError
from snakeddp.environment.builds import BUILDS, TorchBuild

REGISTRY = "mcr.microsoft.com/azureml"
#: Default base image per CUDA major of the build (None: the CPU build).
DEFAULT_IMAGES: dict[int | None, str] = {
    13: f"{REGISTRY}/openmpi5.0-cuda13.1-ubuntu24.04:latest",
    12: f"{REGISTRY}/openmpi5.0-cuda12.6-ubuntu24.04:20250701.v1",
    None: f"{REGISTRY}/openmpi5.0-ubuntu24.04:20250701.v1",
}
# AzureML's and PyTorch's names (openmpi5.0-cuda12.6-ubuntu24.04, pytorch:2.5.1-cuda12.4-cudnn9-runtime),
# and NVIDIA's, whose repository is cuda and whose tag starts with the version (nvidia/cuda:12.6.3-base-ubuntu24.04).
NAMED_CUDA = re.compile(r"cuda[-_]?(?P<version>\d+\.\d+)", re.IGNORECASE)
NVIDIA_CUDA_TAG = re.compile(r"(?:^|/)cuda:(?P<version>\d+\.\d+)")


def cuda_of(image: str) -> str | None:
    """The CUDA version an image reference names ("12.6"), or None when its name says none."""
    name = image.removeprefix("docker://").split("@")[0]
    match = NVIDIA_CUDA_TAG.search(name) or NAMED_CUDA.search(name)
    return match["version"] if match else None


def default_image(build: TorchBuild) -> str:
    """The image of the build's CUDA major: what ``azureml.environment.image: null`` stands for."""
    return DEFAULT_IMAGES[build.cuda_major]


def check(image: str, build: TorchBuild) -> None:
    """Refuse an image whose name names a CUDA major other than the build's (one line, with a HINT)."""
    named = cuda_of(image)
    if named is None or build.cuda_major is None:
        return
    major = int(named.split(".")[0])
    if major == build.cuda_major:
        return
    fitting = [other for other in BUILDS.values() if other.cuda_major == major]
    # Only a build whose lock has hashes installs (AzureML's image environment refuses the others before any spec).
    from snakeddp.environment.cuda import locked as hashed  # on the way to a refusal only

    locked = [f'"{other.cuda}"' for other in fitting if hashed(other.cuda) is not False]
    keep = f", or set environment.cuda: {' or '.join(locked)} to keep this image" if locked else ""
    if fitting and not locked:
        keep = (
            f' (environment.cuda "{fitting[0].cuda}" would keep this image once a maintainer locks it: tools/lock.sh '
            f"where {fitting[0].index_url} answers)"
        )
    raise AzureMLError(
        f"azureml.environment.image={image} is a CUDA {named} image, but environment.cuda={build.cuda} installs "
        f"torch's CUDA {build.cuda_major} build (NVIDIA driver {build.driver} or newer). HINT: set "
        f"azureml.environment.image to a CUDA {build.cuda_major} image such as {default_image(build)}, or to "
        f"null for the image that follows environment.cuda{keep} (docs/azureml.md)."
    )
