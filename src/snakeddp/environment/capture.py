"""Capture the environment a stage runs in: resolved packages, interpreter, accelerator stack,
and the container image or conda environment it came from.

The record's hash covers what decides a stage's software (package versions, Python, torch's
CUDA/cuDNN/NCCL builds, the lock, the image digest, the conda packages), not when, where or
by which path it was captured, so recapturing an unchanged environment gives the same hash and
retrains nothing. Runs inside the stage's own interpreter (venv, conda env or container), and
imports torch only for an accelerator build (CUDA, ROCm, XPU), whose cuDNN, NCCL and GPUs only
torch can report; Lightning's version comes from package metadata.

Beside the record, ``<stage>.cdx.json`` is the CycloneDX bill of materials of the same interpreter
(snakeddp.environment.sbom: cyclonedx-py's, with each package's installed-files digest and index); the
record names it with its sha256. It is not part of the hash: the lock's hashes (``lock_sha256``) already
say which files may be installed, and the digests differ between installers of the same wheels.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakeddp.environment import sbom
from snakeddp.environment.lock import installed, read_lock
from snakeddp.util import gpus
from snakeddp.util.cudabuild import read_version_file
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.hashing import sha256_file, sha256_json

RECORD_FORMAT = "snakeddp-environment/1"
SBOM_SUFFIX = ".cdx.json"
_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


def accelerator_stack() -> dict[str, Any]:
    """torch and lightning versions, the CUDA, cuDNN and NCCL torch was built with (None when
    absent: a CPU build, or a stage without torch), the node's NVIDIA driver, and each visible GPU
    with its compute capability: together they say why a build ran, or found no kernel image."""
    stack: dict[str, Any] = {
        "torch": None,
        "lightning": None,
        "cuda": None,
        "cudnn": None,
        "nccl": None,
        "gpus": [],
        # Read without torch, so a CPU build on a GPU node still shows the driver it could have used.
        "nvidia_driver": nvidia_driver(),
        "gpu_capabilities": [],
    }
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return stack
    if importlib.util.find_spec("lightning") is not None:
        stack["lightning"] = importlib.metadata.version("lightning")
    build = read_version_file(Path(spec.origin).parent / "version.py")
    if build is not None and not (build.cuda or build.hip or build.xpu):
        # A CPU build has no cuDNN, NCCL or GPUs to ask about: its version file says all there
        # is, without the seconds `import torch` costs each environment job.
        stack["torch"] = build.__version__
        return stack
    import torch

    stack["torch"] = torch.__version__
    stack["cuda"] = torch.version.cuda
    if torch.backends.cudnn.is_available():
        stack["cudnn"] = torch.backends.cudnn.version()
    if torch.version.cuda and hasattr(torch.cuda, "nccl"):
        version = torch.cuda.nccl.version()
        stack["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    # Asked of the driver's NVML, not CUDA: a GPU this build cannot initialise (a driver too old) is still
    # recorded, and the record never raises for it. "7.0" on a V100, which CUDA 13 builds have no kernels for.
    shown = gpus.visible(os.environ)
    stack["gpus"] = [gpu.model for gpu in shown]
    stack["gpu_capabilities"] = [".".join(map(str, gpu.capability)) for gpu in shown if gpu.capability]
    return stack


def nvidia_driver(version_file: Path | None = None) -> str | None:
    """The loaded NVIDIA kernel module's version (570.86.15), or None when none is loaded."""
    return gpus.driver_version(version_file.parent if version_file else None)


def accelerator_and_backend(requested: str) -> tuple[str, str]:
    """cpu+gloo, or gpu+nccl: what a training process uses, and what its provenance says it used.
    ``requested`` is the run's accelerator as its launch decided it (``run.variables.accelerator``);
    a rank told gpu checks its GPU first (``cuda.check_device``)."""
    return ("gpu", "nccl") if requested == "gpu" else ("cpu", "gloo")


def container_info(image: str | None, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The image a job runs in: the reference Snakemake was given, and its digest.

    The digest is the reference's own (``…@sha256:…``) when it pins one, and the image file's
    sha256 when Apptainer shows it (Snakemake keeps pulled images under the working directory,
    which Apptainer binds).
    """
    path = env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER")
    if not image and not path:
        return None
    pinned = _DIGEST.search(image or "")
    image_file = Path(path) if path else None
    return {
        "reference": image,
        "runtime": "apptainer" if path else None,
        "image_path": path,
        "digest": pinned[1] if pinned else None,
        "image_sha256": sha256_file(image_file) if image_file is not None and image_file.is_file() else None,
    }


def conda_info(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The conda environment this interpreter belongs to (Snakemake's --sdm conda envs are named
    after the hash of their YAML), and every conda package in it, Python itself included."""
    prefix = env.get("CONDA_PREFIX")
    if not prefix or Path(prefix).resolve() != Path(sys.prefix).resolve():
        return None
    packages = {}
    for meta in sorted((Path(prefix) / "conda-meta").glob("*.json")):
        record = json.loads(meta.read_text(encoding="utf-8"))
        packages[record["name"]] = f"{record['version']}={record.get('build', '')}"
    return {"prefix": prefix, "env": Path(prefix).name, "packages": packages}


def sbom_path(record_path: str | Path) -> Path:
    """results/envs/<stage>.cdx.json beside results/envs/<stage>.json."""
    record_path = Path(record_path)
    return record_path.with_name(record_path.name.removesuffix(".json") + SBOM_SUFFIX)


def installed_from(lock_path: str | Path, prefix: Path | None = None) -> list[dict[str, str]]:
    """The locks this environment was installed from, each with its sha256 and its PEP 751 twin beside it
    (pylock.<name>.toml, tools/lock.sh): the lock named, and the dev lock where tools/setup.sh --dev made the venv
    (it leaves .snakeddp-dev there)."""
    lock_path = Path(lock_path)
    prefix = Path(sys.prefix) if prefix is None else prefix
    locks = [lock_path]
    dev = lock_path.with_name("requirements-dev.lock")
    if (prefix / ".snakeddp-dev").is_file() and dev.is_file() and dev != lock_path:
        locks.append(dev)
    found = []
    for lock in locks:
        entry = {"lock": str(lock), "sha256": sha256_file(lock)}
        pylock = lock.with_name(f"pylock.{lock.name.removesuffix('.lock')}.toml")
        if pylock.is_file():
            entry.update(pylock=str(pylock), pylock_sha256=sha256_file(pylock))
        found.append(entry)
    return found


def write_sbom(record_path: str | Path, lock_path: str | Path, locks: list[dict[str, str]]) -> dict[str, Any]:
    """The bill of materials of this interpreter beside the record, naming the locks it was installed from (its
    metadata's properties, as CycloneDX keeps a producer's own facts); what the record says of it."""
    lock_path = Path(lock_path)
    dev = lock_path.with_name("requirements-dev.lock")
    lock = read_lock(lock_path, *([dev] if dev.is_file() and dev != lock_path else []))
    bom = sbom.cached(lock)
    named = [
        {"name": f"snakeddp:installed_from:{key}", "value": entry[key]}
        for entry in locks
        for key in ("lock", "sha256", "pylock", "pylock_sha256")
        if key in entry
    ]
    metadata = bom.get("metadata", {})
    bom = {**bom, "metadata": {**metadata, "properties": [*metadata.get("properties", []), *named]}}
    path = sbom_path(record_path)
    atomic_write_json(path, bom)
    tools = bom.get("metadata", {}).get("tools", {}).get("components", [])
    return {
        "file": path.name,
        "sha256": sha256_file(path),
        "format": f"CycloneDX {bom.get('specVersion')}",
        "tool": " ".join(f"{t.get('name')} {t.get('version')}" for t in tools if t.get("name") == "cyclonedx-py"),
        "components": len(bom.get("components", [])),
    }


def capture(
    stage: str,
    lock_path: str | Path,
    out_path: str | Path,
    image: str | None = None,
    env: Mapping[str, str] = os.environ,
) -> dict:
    """Write ``out_path`` (results/envs/<stage>.json) and return the record."""
    stack = accelerator_stack()
    container = container_info(image, env)
    conda = conda_info(env)
    packages = {key: pin.version for key, pin in installed().items()}
    locks = installed_from(lock_path)
    identity = {
        "packages": packages,
        "python": platform.python_version(),
        "torch": stack["torch"],
        "cuda": stack["cuda"],
        "cudnn": stack["cudnn"],
        "nccl": stack["nccl"],
        "lock_sha256": sha256_file(lock_path),
        # An image is identified by its digest; by its reference only when no digest is known.
        "image": container and (container["digest"] or container["image_sha256"] or container["reference"]),
        "conda_packages": conda and conda["packages"],
    }
    record = {
        "format": RECORD_FORMAT,
        "stage": stage,
        **identity,
        "sbom": write_sbom(out_path, lock_path, locks),
        "lock": str(lock_path),
        "installed_from": locks,
        "container": container,
        "conda": conda and {k: v for k, v in conda.items() if k != "packages"},
        "versions": {
            **stack,
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
            "executable": sys.executable,
        },
        "hash": sha256_json(identity),
    }
    atomic_write_json(out_path, record)
    return record
