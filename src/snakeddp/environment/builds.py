"""The torch builds ``environment.cuda`` chooses between: one version (the lock's), several wheel indexes.

PyPI's Linux torch 2.13 wheel is the CUDA 13.0 build, which has kernels for compute capability 7.5
(Turing) and newer only and needs an NVIDIA driver of the CUDA 13 line: on V100 or P100 nodes it
fails with "no kernel image is available", and under an older driver torch sees no GPU. PyTorch
publishes the same version for other CUDA releases on its own indexes, with a local version label
(``torch==2.13.0+cu126``), so the lock's ``torch==2.13.0`` stays the one version and the build is a
choice made where the environment is built: the stage conda YAMLs (envs/<stage>-<label>.yaml),
envs/Dockerfile's TORCH_INDEX_URL, and AzureML's image environment.

The table follows PyTorch's release matrix for 2.12-2.14 (RELEASE.md, "PyTorch CUDA Support
Matrix"; pytorch/pytorch#197555 says 2.13's is 2.14's): CUDA 12.6 is the legacy build (Maxwell,
Pascal, Volta), 13.0 the stable one published to PyPI, 13.2 the newest; 12.8 is no longer built
since 2.12. Driver minimums are NVIDIA's for each CUDA major release (minor-version compatibility).
"""

from __future__ import annotations

from dataclasses import dataclass

from snakeddp.errors import ConfigError

PYTORCH_INDEX = "https://download.pytorch.org/whl"
PYPI_INDEX = "https://pypi.org/simple"


@dataclass(frozen=True)
class TorchBuild:
    """One build of the locked torch version, as an ``environment.cuda`` value names it."""

    cuda: str
    #: The wheel's local version label on PyTorch's index; None for PyPI's own wheel (the default).
    label: str | None
    #: GPUs and drivers it runs on, for docs and hints.
    serves: str
    #: The oldest NVIDIA driver its CUDA major release runs on; None for the CPU build.
    driver: str | None = None

    @property
    def cuda_major(self) -> int | None:
        """13 for the 13.x builds, 12 for 12.6: what a CUDA image must match; None for the CPU build."""
        return None if self.label == "cpu" else int(self.cuda.split(".")[0])

    @property
    def index_url(self) -> str:
        """Where pip finds this build: PyPI for the default, else PyTorch's index of the label."""
        return PYPI_INDEX if self.label is None else f"{PYTORCH_INDEX}/{self.label}"

    def torch_pin(self, version: str) -> str:
        """The exact pin of this build: ``torch==2.13.0`` from PyPI, ``torch==2.13.0+cu126`` from PyTorch's index."""
        return f"torch=={version}" if self.label is None else f"torch=={version}+{self.label}"

    def pip_options(self) -> list[str]:
        """pip lines that make this build installable next to PyPI's other packages."""
        return [] if self.label is None else [f"--extra-index-url {self.index_url}"]


BUILDS: dict[str, TorchBuild] = {
    build.cuda: build
    for build in (
        TorchBuild(
            "13.0", None, "compute capability 7.5 (Turing) to 12.0 (Blackwell); NVIDIA driver 580 or newer", "580"
        ),
        TorchBuild(
            "13.2", "cu132", "compute capability 7.5 (Turing) to 12.0 (Blackwell); NVIDIA driver 580 or newer", "580"
        ),
        TorchBuild(
            "12.6",
            "cu126",
            "compute capability 5.0 (Maxwell), 6.0 (Pascal, P100), 7.0 (Volta, V100) to 9.0 (Hopper); "
            "NVIDIA driver 525.60.13 or newer",
            "525.60.13",
        ),
        TorchBuild("cpu", "cpu", "CPUs only, without CUDA libraries (a much smaller install)"),
    )
}
#: PyPI's own wheel: what envs/requirements.lock installs where no index is named.
DEFAULT = "13.0"


def torch_build(cuda: str) -> TorchBuild:
    """The build ``environment.cuda`` names; a ConfigError with the choices for anything else."""
    try:
        return BUILDS[str(cuda)]
    except KeyError:
        choices = ", ".join(f'"{name}"' for name in BUILDS)
        raise ConfigError(
            f"environment.cuda={cuda!r} names no torch build. HINT: choose one of {choices} "
            "(docs/environments.md says which GPUs and drivers each serves)."
        ) from None
